"""A built-in toy dialogue task: small talk → replies, the articles' example, no download.

The self-attention article (built on Michael Phi's and Hedu AI's illustrated guides) shows a
chatbot answering "Hi, How are you?" with "I am fine".
This task generates such exchanges: greetings, questions about well-being, names, age, where
one lives, likes and thanks, each asked in a few paraphrases, with or without a greeting
before it ("Hello, how is it going?"), in any case and with or without its final punctuation.
The reply depends only on what is asked, and copies the name or the thing when there is one
("Call me Nora." → "Nice to meet you, Nora"), so a model can learn the mapping, and an
attention model shows the copy as a sharp line.

The held-out split is by source string: a fixed tenth of all possible sources (chosen by a
hash of the seed and the string) never appears in training, so exact match on it measures
answering questions phrased in ways never seen. The article's pair is always in training and
never held out.
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Callable, Iterator

from heedful.tasks.dates import Task

ARTICLE_PAIR = ("Hi, How are you?", "I am fine")

# Said before a question or an introduction ("" : nothing before it).
_GREETINGS = ("", "Hi, ", "Hello, ", "Hey, ", "Hi there, ", "Good morning, ")
_NAMES = (
    "Anna", "Ben", "Carlos", "Dana", "Elif", "Farah", "George", "Hana", "Ivan", "Julia", "Kenji",
    "Lena", "Mateo", "Nora", "Omar", "Priya", "Quinn", "Rosa", "Sam", "Tariq", "Uma", "Victor",
    "Wei", "Yusuf", "Zoe",
)  # fmt: skip
_THINGS = (
    "tea", "coffee", "music", "books", "cats", "dogs", "pizza", "chess", "football", "movies",
    "rain", "summer", "jazz", "cooking", "travel", "dancing",
)  # fmt: skip

# (paraphrases, reply): every paraphrase of a question gets the same reply.
_QUESTIONS = (
    (("How are you", "How are you doing", "How is it going", "How are things", "Are you well"),
     "I am fine"),
    (("What is your name", "What's your name", "Who are you", "May I ask your name"),
     "My name is Heedful"),
    (("How old are you", "What is your age", "When were you born"), "I am two years old"),
    (("Where are you from", "Where do you live", "Where do you come from"),
     "I live in a computer"),
)  # fmt: skip
_INTRODUCTIONS = ("I am {}", "My name is {}", "Call me {}", "I'm {}")
_LIKES = ("Do you like {}", "Do you enjoy {}", "Are you a fan of {}")
# Said on their own: (paraphrases, reply).
_PHRASES = (
    (("Hi", "Hello", "Hey", "Hi there", "Hey there"), "Hello"),
    (("Good morning",), "Good morning"),
    (("Good evening",), "Good evening"),
    (("Thank you", "Thanks", "Thanks a lot", "Thank you very much"), "You are welcome"),
    (("Bye", "Goodbye", "See you later", "See you soon"), "Goodbye"),
    (("Good night",), "Good night"),
)


def _after_greeting(greeting: str, text: str, rng: random.Random) -> str:
    """The greeting, then the text with its first letter as typed: "Hi, How are you" (as in
    the article) or "Hi, how are you"."""
    if greeting and rng.random() < 0.5:
        text = text[:1].lower() + text[1:]
    return greeting + text


def _question(rng: random.Random) -> tuple[str, str]:  # Hello, how is it going? -> I am fine
    paraphrases, reply = rng.choice(_QUESTIONS)
    text = _after_greeting(rng.choice(_GREETINGS), rng.choice(paraphrases), rng)
    return text + rng.choice(("?", "")), reply


def _introduction(rng: random.Random) -> tuple[str, str]:  # Hi, call me Nora. -> ..., Nora
    name = rng.choice(_NAMES)
    text = _after_greeting(rng.choice(_GREETINGS), rng.choice(_INTRODUCTIONS).format(name), rng)
    return text + rng.choice((".", "!", "")), f"Nice to meet you, {name}"


def _likes(rng: random.Random) -> tuple[str, str]:  # Do you enjoy jazz? -> Yes, I like jazz
    thing = rng.choice(_THINGS)
    text = _after_greeting(rng.choice(_GREETINGS), rng.choice(_LIKES).format(thing), rng)
    return text + rng.choice(("?", "")), f"Yes, I like {thing}"


def _phrase(rng: random.Random) -> tuple[str, str]:  # Thanks a lot! -> You are welcome
    paraphrases, reply = rng.choice(_PHRASES)
    return rng.choice(paraphrases) + rng.choice(("!", ".", "")), reply


# Each kind of exchange is equally likely; questions are the article's kind, so they come twice.
_KINDS: list[Callable[[random.Random], tuple[str, str]]] = [
    _question,
    _question,
    _introduction,
    _likes,
    _phrase,
]


def _lower_case(source: str) -> str:
    """The source as typed in lower case, all but a name at its end: "hi, call me Nora"."""
    head, _, last = source.rpartition(" ")
    if last.rstrip("?!.") in _NAMES:
        return f"{head.lower()} {last}"
    return source.lower()


def _pairs(rng: random.Random) -> Iterator[tuple[str, str]]:
    """An endless stream of (source, reply); a fifth of the sources are typed in lower case."""
    while True:
        source, reply = rng.choice(_KINDS)(rng)
        yield (_lower_case(source) if rng.random() < 0.2 else source), reply


def is_held_out(source: str, seed: int) -> bool:
    """Whether `source` belongs to the held-out tenth under this seed (never the article's)."""
    if source == ARTICLE_PAIR[0]:
        return False
    return zlib.crc32(f"{seed}\t{source}".encode()) % 10 == 0


def dialogue_task(n_train: int, n_test: int, seed: int = 0) -> Task:
    """n_train training pairs (the article's pair first) and n_test distinct held-out pairs.

    Both come from one seeded stream, so the result is a deterministic function of
    (n_train, n_test, seed); training sources repeat (common exchanges are common), held-out
    sources do not, and no held-out source is ever a training source.
    """
    if n_train < 1 or n_test < 0:
        raise ValueError(f"need n_train >= 1 and n_test >= 0, got {n_train} and {n_test}")
    train, test, last_new = [ARTICLE_PAIR], {}, 0
    for draws, (source, reply) in enumerate(_pairs(random.Random(seed))):
        if not is_held_out(source, seed):
            if len(train) < n_train:
                train.append((source, reply))
        elif len(test) < n_test and source not in test:
            test[source], last_new = reply, draws
        if len(train) == n_train and len(test) == n_test:
            return Task(train=train, test=list(test.items()))
        if draws - last_new > 100_000:  # the held-out tenth has fewer distinct sources
            raise ValueError(
                f"the dialogue task has {len(test)} held-out questions, not {n_test}: ask for fewer"
            )
    raise AssertionError("unreachable: the stream is endless")
