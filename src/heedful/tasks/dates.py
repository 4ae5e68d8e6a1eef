"""Built-in generated tasks: human-written dates → ISO dates, a translation task with no download.

(The toy dialogue task, the articles' own example, is in dialogue.py.)

A date such as 2026-11-29 is written in one of many formats and four languages ("Sunday,
29 November 2026", "29. Nov. 2026", "le 29 novembre 2026", "29 de noviembre de 2026",
"11/29/2026", "29.11.26", ...) and the target is its ISO form "2026-11-29". Reading the month
name, reordering day and month and expanding two-digit years makes the attention easy to see:
each output digit should look at the source characters it comes from.

The task is unambiguous: every source string denotes exactly one date, so a perfect model
exists. The rules that guarantee it:

- Numeric day-first formats use "." only (29.11.2026); numeric month-first formats use "/"
  only and end in a 4-digit year (11/29/2026); year-first formats start with the 4-digit year
  (2026/11/29, 2026.11.29). So the separator and the position of the 4-digit year fix the order.
- Two-digit years are written only for years 1950-2049 and are read with a pivot, as many date
  parsers do: yy >= 50 means 19yy, yy < 50 means 20yy. Other years keep all four digits.
- Formats with a month name always give the day before the year, so the first number is the
  day and the second the year.
- Every month word (full name or abbreviation, any language, any case) names one month, and no
  weekday word is also a month word. "mar" is March in English and Spanish, "mai" May in French
  and German: shared spellings are fine as long as they agree.
- A weekday, when shown, is the true weekday of the date.
"""

from __future__ import annotations

import datetime
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import islice

# Month names from January; weekday names from Monday, the order of date.weekday().
_EN_MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)
_EN_MONTHS_ABBR = (
    "Jan",
    "Feb",
    "Mar",
    "Apr",
    "May",
    "Jun",
    "Jul",
    "Aug",
    "Sep",
    "Oct",
    "Nov",
    "Dec",
)
_EN_WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_EN_WEEKDAYS_ABBR = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")

_DE_MONTHS = (
    "Januar",
    "Februar",
    "März",
    "April",
    "Mai",
    "Juni",
    "Juli",
    "August",
    "September",
    "Oktober",
    "November",
    "Dezember",
)
# Duden abbreviations: short names are written out and take no dot.
_DE_MONTHS_ABBR = (
    "Jan.",
    "Feb.",
    "März",
    "Apr.",
    "Mai",
    "Juni",
    "Juli",
    "Aug.",
    "Sept.",
    "Okt.",
    "Nov.",
    "Dez.",
)
_DE_WEEKDAYS = ("Montag", "Dienstag", "Mittwoch", "Donnerstag", "Freitag", "Samstag", "Sonntag")

_FR_MONTHS = (
    "janvier",
    "février",
    "mars",
    "avril",
    "mai",
    "juin",
    "juillet",
    "août",
    "septembre",
    "octobre",
    "novembre",
    "décembre",
)
_FR_WEEKDAYS = ("lundi", "mardi", "mercredi", "jeudi", "vendredi", "samedi", "dimanche")

_ES_MONTHS = (
    "enero",
    "febrero",
    "marzo",
    "abril",
    "mayo",
    "junio",
    "julio",
    "agosto",
    "septiembre",
    "octubre",
    "noviembre",
    "diciembre",
)
_ES_MONTHS_ABBR = (
    "ene",
    "feb",
    "mar",
    "abr",
    "may",
    "jun",
    "jul",
    "ago",
    "sep",
    "oct",
    "nov",
    "dic",
)
# No Spanish weekday abbreviations: "mar" (martes) would also read as March.
_ES_WEEKDAYS = ("lunes", "martes", "miércoles", "jueves", "viernes", "sábado", "domingo")


def _en_ordinal(day: int) -> str:
    """29 → "29th", 1 → "1st", but 11-13 take "th"."""
    suffix = "th" if 11 <= day <= 13 else {1: "st", 2: "nd", 3: "rd"}.get(day % 10, "th")
    return f"{day}{suffix}"


def _fr_day(day: int) -> str:
    """French writes the first of the month as an ordinal, "1er", and other days as numbers."""
    return "1er" if day == 1 else str(day)


def _short_year(year: int) -> str:
    """Two digits only where the 1950-2049 pivot reads them back to this year, else four."""
    return f"{year % 100:02d}" if 1950 <= year <= 2049 else str(year)


def _numbers(d: datetime.date, rng: random.Random) -> tuple[str, str]:
    """Day and month for numeric formats, both with leading zeros ("05", "03") or neither."""
    spec = "02d" if rng.random() < 0.5 else "d"
    return f"{d.day:{spec}}", f"{d.month:{spec}}"


# One function per format; each takes the rng even if unused so all share one signature.
# The comments render 2026-11-29 (a Sunday).
_DateFormat = Callable[[datetime.date, random.Random], str]


def _en_weekday_long(d: datetime.date, rng: random.Random) -> str:  # Sunday, 29 November 2026
    return f"{_EN_WEEKDAYS[d.weekday()]}, {d.day} {_EN_MONTHS[d.month - 1]} {d.year}"


def _en_day_month(d: datetime.date, rng: random.Random) -> str:  # 29 November 2026
    return f"{d.day} {_EN_MONTHS[d.month - 1]} {d.year}"


def _en_month_day(d: datetime.date, rng: random.Random) -> str:  # November 29, 2026
    return f"{_EN_MONTHS[d.month - 1]} {d.day}, {d.year}"


def _en_abbr_ordinal(d: datetime.date, rng: random.Random) -> str:  # Nov 29th 2026
    return f"{_EN_MONTHS_ABBR[d.month - 1]} {_en_ordinal(d.day)} {d.year}"


def _en_abbr_day(d: datetime.date, rng: random.Random) -> str:  # Nov 29 2026
    return f"{_EN_MONTHS_ABBR[d.month - 1]} {d.day} {d.year}"


def _en_the_ordinal(d: datetime.date, rng: random.Random) -> str:  # the 29th of November, 2026
    return f"the {_en_ordinal(d.day)} of {_EN_MONTHS[d.month - 1]}, {d.year}"


def _en_weekday_abbr(d: datetime.date, rng: random.Random) -> str:  # Sun 29 Nov 2026
    return f"{_EN_WEEKDAYS_ABBR[d.weekday()]} {d.day} {_EN_MONTHS_ABBR[d.month - 1]} {d.year}"


def _en_short_year(d: datetime.date, rng: random.Random) -> str:  # 29 Nov 26
    return f"{d.day} {_EN_MONTHS_ABBR[d.month - 1]} {_short_year(d.year)}"


def _us_numeric(d: datetime.date, rng: random.Random) -> str:  # 11/29/2026
    day, month = _numbers(d, rng)
    return f"{month}/{day}/{d.year}"


def _de_weekday(d: datetime.date, rng: random.Random) -> str:  # Sonntag, 29. November 2026
    return f"{_DE_WEEKDAYS[d.weekday()]}, {d.day}. {_DE_MONTHS[d.month - 1]} {d.year}"


def _de_day_month(d: datetime.date, rng: random.Random) -> str:  # 29. November 2026
    return f"{d.day}. {_DE_MONTHS[d.month - 1]} {d.year}"


def _de_abbr(d: datetime.date, rng: random.Random) -> str:  # 29. Nov. 2026
    return f"{d.day}. {_DE_MONTHS_ABBR[d.month - 1]} {d.year}"


def _de_numeric(d: datetime.date, rng: random.Random) -> str:  # 29.11.2026
    day, month = _numbers(d, rng)
    return f"{day}.{month}.{d.year}"


def _de_numeric_short(d: datetime.date, rng: random.Random) -> str:  # 29.11.26
    day, month = _numbers(d, rng)
    return f"{day}.{month}.{_short_year(d.year)}"


def _fr_weekday(d: datetime.date, rng: random.Random) -> str:  # dimanche 29 novembre 2026
    return f"{_FR_WEEKDAYS[d.weekday()]} {_fr_day(d.day)} {_FR_MONTHS[d.month - 1]} {d.year}"


def _fr_day_month(d: datetime.date, rng: random.Random) -> str:  # 29 novembre 2026
    return f"{_fr_day(d.day)} {_FR_MONTHS[d.month - 1]} {d.year}"


def _fr_le(d: datetime.date, rng: random.Random) -> str:  # le 29 novembre 2026
    return f"le {_fr_day(d.day)} {_FR_MONTHS[d.month - 1]} {d.year}"


def _es_weekday(d: datetime.date, rng: random.Random) -> str:  # domingo, 29 de noviembre de 2026
    return f"{_ES_WEEKDAYS[d.weekday()]}, {d.day} de {_ES_MONTHS[d.month - 1]} de {d.year}"


def _es_de(d: datetime.date, rng: random.Random) -> str:  # 29 de noviembre de 2026
    return f"{d.day} de {_ES_MONTHS[d.month - 1]} de {d.year}"


def _es_abbr(d: datetime.date, rng: random.Random) -> str:  # 29 nov 2026
    return f"{d.day} {_ES_MONTHS_ABBR[d.month - 1]} {d.year}"


def _year_first_slashes(d: datetime.date, rng: random.Random) -> str:  # 2026/11/29
    day, month = _numbers(d, rng)
    return f"{d.year}/{month}/{day}"


def _year_first_dots(d: datetime.date, rng: random.Random) -> str:  # 2026.11.29
    day, month = _numbers(d, rng)
    return f"{d.year}.{month}.{day}"


# Every format is equally likely; add one here and the tests' parser must learn to read it.
_FORMATS: list[_DateFormat] = [
    # English, and US numeric (month first)
    _en_weekday_long,
    _en_day_month,
    _en_month_day,
    _en_abbr_ordinal,
    _en_abbr_day,
    _en_the_ordinal,
    _en_weekday_abbr,
    _en_short_year,
    _us_numeric,
    # German, and numeric day first
    _de_weekday,
    _de_day_month,
    _de_abbr,
    _de_numeric,
    _de_numeric_short,
    # French
    _fr_weekday,
    _fr_day_month,
    _fr_le,
    # Spanish
    _es_weekday,
    _es_de,
    _es_abbr,
    # year first
    _year_first_slashes,
    _year_first_dots,
]

_EXAMPLE_DATE = datetime.date(2026, 11, 29)
DATE_FORMAT_EXAMPLES: list[str] = [
    fmt(_EXAMPLE_DATE, random.Random(0))
    for fmt in (
        _en_weekday_long,
        _en_the_ordinal,
        _en_short_year,
        _us_numeric,
        _de_abbr,
        _de_numeric,
        _fr_le,
        _es_weekday,
        _year_first_dots,
    )
]


def _vary_case(text: str, rng: random.Random) -> str:
    """People type dates in any case; the model should read "NOV", "Nov" and "nov" alike."""
    r = rng.random()
    if r < 0.55:
        return text  # as the language writes it
    if r < 0.8:
        return text.lower()
    if r < 0.9:
        return text[:1].upper() + text[1:]  # "Le 29 novembre 2026", "The 1st of May, 2026"
    return text.upper()


def format_date(d: datetime.date, rng: random.Random) -> str:
    """One human-written rendering of d, in a randomly chosen format, language and case."""
    fmt = rng.choice(_FORMATS)
    return _vary_case(fmt(d, rng), rng)


def _check_years(min_year: int, max_year: int) -> None:
    # Years outside 1000-9999 would not print as four digits, which the unambiguity rules need.
    if not 1000 <= min_year <= max_year <= 9999:
        raise ValueError(f"need 1000 <= min_year <= max_year <= 9999, got {min_year}..{max_year}")


def _pairs(rng: random.Random, min_year: int, max_year: int) -> Iterator[tuple[str, str]]:
    """An endless stream of (source, iso_target), every day in the year range equally likely."""
    first = datetime.date(min_year, 1, 1).toordinal()
    last = datetime.date(max_year, 12, 31).toordinal()
    while True:
        d = datetime.date.fromordinal(rng.randint(first, last))
        yield format_date(d, rng), d.isoformat()


def generate_dates(
    n: int, seed: int, min_year: int = 1900, max_year: int = 2099
) -> list[tuple[str, str]]:
    """n (source, iso_target) pairs, the same for the same arguments.

    Uses its own random.Random(seed), never the global generator, so a demo is reproducible
    whatever else has drawn random numbers. Sources may repeat; use dates_task for a held-out
    split.
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    _check_years(min_year, max_year)
    stream = _pairs(random.Random(seed), min_year, max_year)
    return [next(stream) for _ in range(n)]


@dataclass(frozen=True)
class Task:
    """Train and held-out test pairs of a generated task; no test source appears in train."""

    train: list[tuple[str, str]]  # (source, target)
    test: list[tuple[str, str]]


def dates_task(n_train: int, n_test: int, seed: int = 0) -> Task:
    """Train and test pairs from one seeded stream, with test sources disjoint from train.

    The test set is drawn first, from distinct sources; the train set then takes the next pairs
    whose source is not a test source. Skipping (rather than re-rolling) keeps the result a
    deterministic function of (n_train, n_test, seed). The same date may appear in both sets
    written differently: what is held out is the string, so exact match on test measures
    reading unseen strings, not memorising them.
    """
    if n_train < 0 or n_test < 0:
        raise ValueError(f"sizes must be >= 0, got n_train={n_train}, n_test={n_test}")
    stream = _pairs(random.Random(seed), 1900, 2099)
    test: dict[str, str] = {}
    while len(test) < n_test:
        source, target = next(stream)
        test.setdefault(source, target)
    unseen = (pair for pair in stream if pair[0] not in test)
    return Task(train=list(islice(unseen, n_train)), test=list(test.items()))
