"""The dates task: deterministic, unambiguous, and every source really denotes its target.

The parser below is written independently of heedful.tasks.dates (its own name tables), so a
wrong month name, a wrong weekday or a broken two-digit-year pivot in the generator shows up as
a parse that disagrees with the target.
"""

from __future__ import annotations

import datetime
import random
import re
from collections import Counter

import pytest

from heedful.tasks.dates import (
    DATE_FORMAT_EXAMPLES,
    Task,
    dates_task,
    format_date,
    generate_dates,
)

# --- an independent parser ---------------------------------------------------------------------

# Month words per language, January first (full names and every abbreviation people write).
MONTHS = {
    "en": [
        "january jan",
        "february feb",
        "march mar",
        "april apr",
        "may",
        "june jun",
        "july jul",
        "august aug",
        "september sep sept",
        "october oct",
        "november nov",
        "december dec",
    ],
    "de": [
        "januar jan",
        "februar feb",
        "märz mär",
        "april apr",
        "mai",
        "juni",
        "juli",
        "august aug",
        "september sep sept",
        "oktober okt",
        "november nov",
        "dezember dez",
    ],
    "fr": [
        "janvier janv",
        "février févr",
        "mars",
        "avril avr",
        "mai",
        "juin",
        "juillet juil",
        "août",
        "septembre sept",
        "octobre oct",
        "novembre nov",
        "décembre déc",
    ],
    "es": [
        "enero ene",
        "febrero feb",
        "marzo mar",
        "abril abr",
        "mayo may",
        "junio jun",
        "julio jul",
        "agosto ago",
        "septiembre sep sept",
        "octubre oct",
        "noviembre nov",
        "diciembre dic",
    ],
}
# Weekday words per language, Monday first (date.weekday() order).
WEEKDAYS = {
    "en": [
        "monday mon",
        "tuesday tue",
        "wednesday wed",
        "thursday thu",
        "friday fri",
        "saturday sat",
        "sunday sun",
    ],
    "de": ["montag", "dienstag", "mittwoch", "donnerstag", "freitag", "samstag", "sonntag"],
    "fr": ["lundi", "mardi", "mercredi", "jeudi", "vendredi", "samedi", "dimanche"],
    "es": ["lunes", "martes", "miércoles", "jueves", "viernes", "sábado", "domingo"],
}
# Words that carry no date information, and the language they belong to.
FILLERS = {
    "the": "en",
    "of": "en",
    "st": "en",
    "nd": "en",
    "rd": "en",
    "th": "en",
    "le": "fr",
    "er": "fr",
    "de": "es",
}


def build_lexicon() -> dict[str, tuple[str, int, set[str]]]:
    """word → (kind, value, languages); fails if one word would name two months or days."""
    lexicon: dict[str, tuple[str, int, set[str]]] = {}
    for kind, table in (("month", MONTHS), ("weekday", WEEKDAYS)):
        for lang, rows in table.items():
            for value, row in enumerate(rows, start=1 if kind == "month" else 0):
                for word in row.split():
                    old_kind, old_value, langs = lexicon.setdefault(word, (kind, value, set()))
                    assert (old_kind, old_value) == (kind, value), f"{word!r} is ambiguous"
                    langs.add(lang)
    return lexicon


LEXICON = build_lexicon()
NUMERIC = [
    ("year_first", re.compile(r"(?P<y>\d{4})([./])(?P<m>\d{1,2})\2(?P<d>\d{1,2})")),
    ("month_first", re.compile(r"(?P<m>\d{1,2})/(?P<d>\d{1,2})/(?P<y>\d{4})")),
    ("day_first", re.compile(r"(?P<d>\d{1,2})\.(?P<m>\d{1,2})\.(?P<y>\d{2}|\d{4})")),
]


def read_year(text: str) -> int:
    """Four digits as written; two digits with the 1950-2049 pivot."""
    if len(text) == 4:
        return int(text)
    assert len(text) == 2, text
    yy = int(text)
    return 1900 + yy if yy >= 50 else 2000 + yy


def ordinal_suffixes(day: int) -> set[str]:
    """English 1st 2nd 3rd 4th ... 11th 12th 13th ... 21st 22nd 23rd ... 31st; French "1er"."""
    english = {1: "st", 21: "st", 31: "st", 2: "nd", 22: "nd", 3: "rd", 23: "rd"}.get(day, "th")
    return {english, "er"} if day == 1 else {english}


def parse(source: str) -> tuple[datetime.date, dict]:
    """source → (date, facts): facts say which format family, languages, weekday were seen."""
    for family, pattern in NUMERIC:
        match = pattern.fullmatch(source)
        if match:
            y, m, d = (match[k] for k in "ymd")
            date = datetime.date(read_year(y), int(m), int(d))
            return date, {"family": family, "langs": set(), "weekday": None, "year": y}
    tokens = re.findall(r"\d+|[^\W\d_]+", source.lower())
    for number, suffix in re.findall(r"(\d+)(st|nd|rd|th|er)\b", source.lower()):
        assert suffix in ordinal_suffixes(int(number)), f"wrong ordinal in {source!r}"
    # Only letters, digits, spaces and a little punctuation may appear at all.
    assert re.fullmatch(r"[\w ,.]+", source), source
    numbers, months, weekdays, langs = [], [], [], []
    for token in tokens:
        if token.isdigit():
            numbers.append(token)
        elif token in LEXICON:
            kind, value, token_langs = LEXICON[token]
            (months if kind == "month" else weekdays).append(value)
            langs.append(token_langs)
        else:
            assert token in FILLERS, f"unknown word {token!r} in {source!r}"
            langs.append({FILLERS[token]})
    assert len(months) == 1 and len(weekdays) <= 1 and len(numbers) == 2, source
    day, year = numbers  # with a month name the day always comes first
    assert len(day) <= 2, source
    date = datetime.date(read_year(year), months[0], int(day))
    weekday = weekdays[0] if weekdays else None
    common = set.intersection(*langs)
    assert common, f"{source!r} mixes languages"
    return date, {"family": "words", "langs": common, "weekday": weekday, "year": year}


# --- tests ---------------------------------------------------------------------------------------

SAMPLES = generate_dates(5000, seed=1)


def test_same_seed_same_pairs_different_seed_different_pairs():
    assert generate_dates(300, seed=7) == generate_dates(300, seed=7)
    assert generate_dates(300, seed=7) != generate_dates(300, seed=8)


def test_generation_ignores_the_global_random_state():
    random.seed(1)
    first = generate_dates(50, seed=3)
    random.seed(2)
    assert generate_dates(50, seed=3) == first


def test_targets_are_iso_dates_in_the_year_range():
    for _, target in generate_dates(2000, seed=2, min_year=1990, max_year=1995):
        assert len(target) == 10
        assert 1990 <= datetime.date.fromisoformat(target).year <= 1995


def test_dates_cover_the_whole_range_roughly_uniformly():
    years = Counter(t[:4] for _, t in generate_dates(4000, seed=3, min_year=2000, max_year=2003))
    assert set(years) == {"2000", "2001", "2002", "2003"}
    assert min(years.values()) > 850  # 1000 each expected; a stuck or skewed sampler fails


def test_every_source_parses_back_to_its_target():
    for source, target in SAMPLES + generate_dates(3000, seed=4, min_year=1950, max_year=2049):
        date, _ = parse(source)
        assert date.isoformat() == target, source


def test_edge_days_parse_back():
    """Ordinal suffixes (1st, 2nd, 3rd, 11th-13th, 21st, 31st, 1er) and leap days."""
    rng = random.Random(5)
    days = [datetime.date(2024, 2, 29), datetime.date(1900, 1, 1), datetime.date(2099, 12, 31)]
    days += [datetime.date(2025, 1, day) for day in (1, 2, 3, 11, 12, 13, 21, 22, 23, 31)]
    for d in days:
        for _ in range(200):
            source = format_date(d, rng)
            assert parse(source)[0] == d, source


def test_a_source_never_maps_to_two_targets():
    seen: dict[str, str] = {}
    for source, target in generate_dates(20000, seed=6):
        assert seen.setdefault(source, target) == target, source


def test_weekday_names_are_the_true_weekday():
    with_weekday = 0
    for source, _ in SAMPLES:
        date, facts = parse(source)
        if facts["weekday"] is not None:
            with_weekday += 1
            assert facts["weekday"] == date.weekday(), source
    assert with_weekday > 500


def test_all_languages_and_numeric_formats_occur_and_sources_are_short():
    families, langs = Counter(), Counter()
    for source, _ in SAMPLES:
        _, facts = parse(source)
        families[facts["family"]] += 1
        if len(facts["langs"]) == 1:  # words that only one language uses
            langs[next(iter(facts["langs"]))] += 1
    assert set(families) == {"words", "year_first", "month_first", "day_first"}
    assert set(langs) == {"en", "de", "fr", "es"}
    assert min(langs.values()) > 200
    assert max(len(source) for source, _ in SAMPLES) <= 40


def test_cases_and_leading_zeros_vary():
    sources = [source for source, _ in SAMPLES]
    assert any(s.isupper() for s in sources)
    assert any(s.islower() and s[0].isalpha() for s in sources)
    assert any(s[0].isupper() and not s.isupper() for s in sources)
    assert any(re.fullmatch(r"0\d\.0\d\.\d+", s) for s in sources)
    assert any(re.fullmatch(r"\d\.\d\.\d+", s) for s in sources)


def test_two_digit_years_follow_the_pivot():
    short = 0
    for source, target in generate_dates(5000, seed=8, min_year=1900, max_year=2099):
        year = parse(source)[1]["year"]
        if len(year) == 2:
            short += 1
            assert 1950 <= int(target[:4]) <= 2049, source
            assert target[2:4] == year
    assert short > 100
    assert read_year("50") == 1950 and read_year("49") == 2049 and read_year("00") == 2000


@pytest.mark.parametrize("min_year, max_year", [(1900, 1949), (2050, 2099)])
def test_no_two_digit_years_outside_the_pivot_window(min_year, max_year):
    for source, _ in generate_dates(2000, seed=9, min_year=min_year, max_year=max_year):
        assert len(parse(source)[1]["year"]) == 4, source


def test_format_examples_all_denote_the_same_date():
    assert len(DATE_FORMAT_EXAMPLES) >= 5
    assert {parse(s)[0] for s in DATE_FORMAT_EXAMPLES} == {datetime.date(2026, 11, 29)}


def test_bad_arguments_are_errors():
    with pytest.raises(ValueError):
        generate_dates(10, seed=0, min_year=2000, max_year=1999)
    with pytest.raises(ValueError):
        generate_dates(10, seed=0, min_year=999)
    with pytest.raises(ValueError):
        dates_task(-1, 10)


def test_dates_task_sizes_disjointness_and_determinism():
    task = dates_task(3000, 500, seed=11)
    assert isinstance(task, Task)
    assert len(task.train) == 3000 and len(task.test) == 500
    test_sources = {source for source, _ in task.test}
    assert len(test_sources) == 500
    assert test_sources.isdisjoint(source for source, _ in task.train)
    assert dates_task(3000, 500, seed=11) == task
    assert dates_task(3000, 500, seed=12) != task
    for source, target in task.test[:200] + task.train[:200]:
        assert parse(source)[0].isoformat() == target
