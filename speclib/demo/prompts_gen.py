"""Synthetic chats for the embedded demo pair, and the prompt sets the CPU demo sends.

Everything here is pure Python and seeded, so the same seed gives byte-identical output on any
machine. :func:`generate_chats` draws template chats whose assistant answers are long (about
65–120 tokens) and predictable from the prompt alone: counting, step lists, fact profiles
(the "known" tasks), and repeat-this-text, periodic patterns and day/month cycles (the
"repeat" tasks, whose answers repeat earlier text, so n-gram lookup finds matches). The tiny
demo pair in :mod:`speclib.demo.models` is trained on these chats.

:func:`build_prompt_sets` draws the prompt files from the same generator with another seed,
plus "unseen" prompts built from a separate vocabulary of topics the pair never saw:

- ``demo-known.jsonl``: training distribution, non-repetitive → draft model accepted often;
- ``demo-unseen.jsonl``: out of distribution → low draft acceptance, nothing for n-grams;
- ``demo-repeat.jsonl``: repetition-heavy answers → n-gram lookup speculation wins;
- ``demo-mixed.jsonl``: the first eight of each, the CPU demo's default workload.

Each line is ``{"id", "category", "messages": [{"role": "user", "content"}]}`` with ids unique
across the sets (``known-003``). ``python -m speclib.demo.prompts_gen [OUT_DIR]`` rewrites them.
"""

from __future__ import annotations

import json
import random
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

__all__ = [
    "KNOWN_KINDS",
    "PROMPT_SEED",
    "PROMPT_SET_NAMES",
    "REPEAT_KINDS",
    "TASK_KINDS",
    "Chat",
    "build_prompt_sets",
    "generate_chats",
    "main",
    "make_chat",
    "prompt_set_lines",
    "unseen_prompts",
    "write_prompt_sets",
]

Category = Literal["known", "unseen", "repeat"]

KNOWN_KINDS = ("count", "steps", "profile")
REPEAT_KINDS = ("repeat", "pattern", "cycle")
TASK_KINDS = KNOWN_KINDS + REPEAT_KINDS
PROMPT_SEED = 20261129
PROMPT_SET_NAMES = ("demo-known", "demo-unseen", "demo-repeat", "demo-mixed")
_SET_SIZE = 24
_MIXED_PER_CATEGORY = 8

# --- training vocabulary ---------------------------------------------------------------------
_FIRST = (
    "Ada", "Ben", "Cleo", "Dario", "Elin", "Farid", "Greta", "Hugo", "Ines", "Jonas", "Kira",
    "Luca", "Mira", "Nils", "Olga", "Pavel", "Quinn", "Rosa", "Sami", "Tara", "Uma", "Victor",
    "Wren", "Yara", "Zeno",
)  # fmt: skip
_LAST = (
    "Stone", "Rivers", "Hill", "Brook", "Field", "Marsh", "Wood", "Lake", "Frost", "Vale",
    "Reed", "Moss", "Cole", "Grant", "Hart", "Shaw",
)  # fmt: skip
_CITIES = (
    "Lund", "Porto", "Graz", "Turku", "Bergen", "Ghent", "Bari", "Cork", "Brno", "Split",
    "Nantes", "Leeds", "Malmo", "Basel", "Delft", "Aarhus", "Tartu", "Riga", "Lyon", "Oslo",
)  # fmt: skip
_JOBS = (
    "baker", "pilot", "nurse", "teacher", "farmer", "painter", "plumber", "chemist", "writer",
    "tailor", "builder", "doctor", "driver", "gardener", "singer", "sailor",
)  # fmt: skip
_COLORS = (
    "red", "blue", "green", "yellow", "orange", "purple", "black", "white", "grey", "brown",
    "pink", "gold",
)  # fmt: skip
_PETS = (
    "cat", "dog", "parrot", "rabbit", "hamster", "turtle", "goldfish", "pony", "goat", "lizard",
)  # fmt: skip
_NOUNS = (
    "cake", "kite", "shelf", "garden", "bicycle", "lamp", "fence", "boat", "chair", "table",
    "sandwich", "tent", "birdhouse", "bookcase", "pizza", "salad", "candle", "basket", "scarf",
    "poster",
)  # fmt: skip
_VERBS = ("make", "build", "clean", "fix", "paint", "prepare")
_STEPS = (
    "Gather the tools and parts you need for the {noun}.",
    "Clear a clean and safe space to work in.",
    "Read the plan for the {noun} from start to end.",
    "Prepare the first part of the {noun} with care.",
    "Join the parts together one at a time.",
    "Check that every part of the {noun} is firm.",
    "Clean up the space and put the tools away.",
    "Show your new {noun} to a friend.",
)
_SENTENCES = (
    "The quiet river runs past our old mill.",
    "A bright kite flies high above green hills.",
    "Seven small boats sail home before dark.",
    "My grandmother bakes fresh bread every Sunday.",
    "Snow falls softly on the sleeping village.",
    "The brave knight rides toward distant castles.",
    "Warm rain taps gently against wooden windows.",
    "Two curious foxes watch from tall grass.",
    "Our teacher reads funny poems after lunch.",
    "Golden leaves dance across empty streets.",
    "The lighthouse keeper counts passing ships.",
    "Children laugh while chasing bubbles outside.",
)
_PATTERNS = (
    ("tick", "tock"), ("ping", "pong"), ("red", "green", "blue"), ("A", "B", "C", "D"),
    ("up", "down"), ("north", "east", "south", "west"), ("do", "re", "mi"),
    ("one", "two", "three"), ("sun", "moon", "star"), ("left", "right"),
    ("spring", "summer", "autumn", "winter"),
)  # fmt: skip
_DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_MONTHS = (
    "January", "February", "March", "April", "May", "June", "July", "August", "September",
    "October", "November", "December",
)  # fmt: skip

# --- vocabulary the pair never sees (for the unseen set) ---------------------------------
_UNSEEN_FRAMES = (
    "Explain how {topic} functions, in plain language for an inquisitive teenager.",
    "What are the main criticisms of {topic}? Give a balanced view.",
    "Write a short poem about {image}.",
    "Summarize the history of {topic} in three paragraphs.",
    "Why might someone be skeptical about {topic}?",
    "Describe {image} as a novelist would.",
    "Compare {topic} with {topic2}: similarities and differences.",
    "Draft a polite e-mail declining an invitation to {event}.",
)
_UNSEEN_TOPICS = (
    "photosynthesis", "plate tectonics", "compound interest", "the immune system",
    "nuclear fusion", "blockchain consensus", "jet propulsion", "vaccination", "ocean tides",
    "quantum entanglement", "inflation targeting", "the printing press", "antibiotic resistance",
    "supply-chain logistics", "Byzantine architecture", "public-key cryptography",
    "glacier formation", "impressionist painting", "the Krebs cycle", "monsoon climates",
)  # fmt: skip
_UNSEEN_IMAGES = (
    "a lighthouse during a thunderstorm", "an abandoned observatory", "autumn fog over vineyards",
    "a crowded spice market at dusk", "a submarine's silent descent", "frost on a cathedral window",
    "migrating cranes above marshland", "a deserted theatre at midnight",
)  # fmt: skip
_UNSEEN_EVENTS = (
    "a philosophy symposium", "a charity gala", "an architecture biennale", "a jazz festival",
    "a robotics workshop", "a wine-tasting excursion",
)  # fmt: skip


@dataclass(frozen=True)
class Chat:
    """One synthetic exchange: which task made it, the user turn and the assistant answer."""

    kind: str
    user: str
    assistant: str


# --- one generator per task kind -----------------------------------------------------------
def _count(rng: random.Random) -> Chat:
    start = rng.randint(1, 40)
    span = rng.randint(60, 75)
    numbers = list(range(start, start + span + 1))
    user = f"Count from {numbers[0]} to {numbers[-1]}."
    head = f"Counting from {numbers[0]} to {numbers[-1]}:"
    return Chat("count", user, f"{head} {' '.join(map(str, numbers))}. Done.")


def _steps(rng: random.Random) -> Chat:
    noun, verb, n = rng.choice(_NOUNS), rng.choice(_VERBS), rng.randint(5, 7)
    user = f"Give me {n} steps to {verb} a {noun}."
    lines = [f"Here is how to {verb} a {noun} in {n} steps."]
    lines += [f"Step {i + 1}: {_STEPS[i].format(noun=noun)}" for i in range(n)]
    lines.append(f"That is all you need to {verb} a {noun}.")
    return Chat("steps", user, "\n".join(lines))


def _profile(rng: random.Random) -> Chat:
    name = f"{rng.choice(_FIRST)} {rng.choice(_LAST)}"
    age, city, job = rng.randint(18, 90), rng.choice(_CITIES), rng.choice(_JOBS)
    color, pet = rng.choice(_COLORS), rng.choice(_PETS)
    user = (
        f"Write a profile for {name}: age {age}, city {city}, job {job}, "
        f"favorite color {color}, pet {pet}."
    )
    answer = (
        f"Profile of {name}.\nName: {name}.\nAge: {age}.\nCity: {city}.\nJob: {job}.\n"
        f"Favorite color: {color}.\nPet: {pet}.\n"
        f"Summary: {name} is {age} years old, lives in {city} and works as a {job}. "
        f"{name} likes the color {color} and has a {pet}."
    )
    return Chat("profile", user, answer)


def _repeat(rng: random.Random) -> Chat:
    sentence, times = rng.choice(_SENTENCES), rng.randint(8, 10)
    user = f"Repeat this sentence {times} times: {sentence}"
    return Chat("repeat", user, "\n".join([sentence] * times))


def _pattern(rng: random.Random) -> Chat:
    unit, n_items = rng.choice(_PATTERNS), rng.randint(70, 90)
    shown = " ".join(unit * 2)
    user = f"Continue this pattern to {n_items} items: {shown}"
    items = [unit[i % len(unit)] for i in range(n_items)]
    return Chat("pattern", user, " ".join(items))


def _cycle(rng: random.Random) -> Chat:
    names, what = (_DAYS, "days") if rng.random() < 0.5 else (_MONTHS, "months")
    first, count = rng.randrange(len(names)), rng.randint(34, 44)
    user = f"List the {count} {what} that come after {names[first]}."
    items = [names[(first + 1 + i) % len(names)] for i in range(count)]
    return Chat("cycle", user, f"After {names[first]} come: {', '.join(items)}.")


_MAKERS: dict[str, Callable[[random.Random], Chat]] = {
    "count": _count,
    "steps": _steps,
    "profile": _profile,
    "repeat": _repeat,
    "pattern": _pattern,
    "cycle": _cycle,
}


def make_chat(kind: str, rng: random.Random) -> Chat:
    """Draw one chat of task ``kind`` (one of :data:`TASK_KINDS`) using ``rng``."""
    try:
        maker = _MAKERS[kind]
    except KeyError:
        raise ValueError(f"`kind` must be one of {TASK_KINDS}, got {kind!r}") from None
    return maker(rng)


def generate_chats(n: int, *, seed: int, kinds: Sequence[str] = TASK_KINDS) -> list[Chat]:
    """``n`` chats cycling through ``kinds`` in order; the same ``seed`` gives the same list."""
    if not isinstance(n, int) or n < 0:
        raise ValueError(f"`n` must be a non-negative integer, got {n!r}")
    if not kinds:
        raise ValueError("`kinds` must name at least one task kind")
    rng = random.Random(seed)
    return [make_chat(kinds[i % len(kinds)], rng) for i in range(n)]


def unseen_prompts(n: int, *, seed: int) -> list[str]:
    """``n`` distinct out-of-distribution prompts (topics and words absent from training)."""
    rng = random.Random(seed)
    seen: set[str] = set()
    out: list[str] = []
    while len(out) < n:
        topic, topic2 = rng.sample(_UNSEEN_TOPICS, 2)
        text = rng.choice(_UNSEEN_FRAMES).format(
            topic=topic, topic2=topic2, image=rng.choice(_UNSEEN_IMAGES),
            event=rng.choice(_UNSEEN_EVENTS),
        )  # fmt: skip
        if text not in seen:
            seen.add(text)
            out.append(text)
    return out


# --- prompt files ----------------------------------------------------------------------------
def _line(category: Category, index: int, content: str) -> dict[str, Any]:
    return {
        "id": f"{category}-{index:03d}",
        "category": category,
        "messages": [{"role": "user", "content": content}],
    }


def _distinct_users(kinds: Sequence[str], n: int, seed: int) -> list[str]:
    rng, users, seen = random.Random(seed), [], set()
    while len(users) < n:
        chat = make_chat(kinds[len(users) % len(kinds)], rng)
        if chat.user not in seen:
            seen.add(chat.user)
            users.append(chat.user)
    return users


def build_prompt_sets(*, seed: int = PROMPT_SEED, size: int = _SET_SIZE) -> dict[str, list[dict]]:
    """The four prompt sets keyed by file stem (see the module docstring), all from ``seed``."""
    if not isinstance(size, int) or size < _MIXED_PER_CATEGORY:
        raise ValueError(f"`size` must be an integer >= {_MIXED_PER_CATEGORY}, got {size!r}")
    known = [
        _line("known", i, u) for i, u in enumerate(_distinct_users(KNOWN_KINDS, size, seed + 1))
    ]
    repeat = [
        _line("repeat", i, u) for i, u in enumerate(_distinct_users(REPEAT_KINDS, size, seed + 2))
    ]
    unseen = [_line("unseen", i, u) for i, u in enumerate(unseen_prompts(size, seed=seed + 3))]
    mixed = [row for i in range(_MIXED_PER_CATEGORY) for row in (known[i], unseen[i], repeat[i])]
    return {"demo-known": known, "demo-unseen": unseen, "demo-repeat": repeat, "demo-mixed": mixed}


def prompt_set_lines(rows: Sequence[dict]) -> str:
    """JSONL text for ``rows``: one compact, key-ordered JSON object per line."""
    return "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)


def write_prompt_sets(out_dir: Path, *, seed: int = PROMPT_SEED) -> list[Path]:
    """Write ``<out_dir>/demo-*.jsonl`` (overwriting) and return the paths written."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for stem, rows in build_prompt_sets(seed=seed).items():
        path = out_dir / f"{stem}.jsonl"
        path.write_text(prompt_set_lines(rows), encoding="utf-8")
        paths.append(path)
    return paths


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m speclib.demo.prompts_gen [OUT_DIR]``: regenerate the demo prompt files."""
    args = list(sys.argv[1:] if argv is None else argv)
    out_dir = Path(args[0]) if args else Path(__file__).resolve().parents[2] / "prompts"
    for path in write_prompt_sets(out_dir):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
