"""heedful: attention seq2seq models; train them, translate with them, see where they look."""

from heedful.cpu import choose_spin_count

# Before torch is imported anywhere below us, which is when libgomp reads it: how long OpenMP's
# threads spin while they wait before they sleep (heedful.cpu, "Threads").
choose_spin_count()

__version__ = "0.1.0"


def load(model_dir, device="cpu", quantize=None, src_lang=None, tgt_lang=None):
    """A Translator for a model directory: `heedful.load(DIR).translate(["Hi."], num_beams=5)`.

    DIR is a heedful model directory, of a text or an image model, or a Hugging Face one
    (Marian, BART, mBART, M2M100/NLLB, T5 in the save_pretrained layout; needs pip install
    'heedful[hf]', see heedful.hf), whose languages src_lang / tgt_lang name for an mBART or
    M2M100/NLLB model. An image captioning model's `.translate(["photo.png", pixels, ...])`
    captions pictures (files, their bytes or (H, W, 3) uint8 arrays), each Translation with its
    grid and, with need_weights=True, its attention over the image.

    quantize="int8" runs its Linear layers in int8 on the CPU (Translator.load says how).
    """
    from heedful.inference.translator import Translator

    return Translator.load(model_dir, device, quantize, src_lang, tgt_lang)
