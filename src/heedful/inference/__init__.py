"""Models at work: the Translator (a source in, text out, and the replay that shows where it
looked), the engines and what each can do, CTranslate2, and heads switched off."""
