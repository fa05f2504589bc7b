"""A brief run of the seeded fuzzer (``bench.fuzz``): mutated inputs of both formats through the real CLI."""

from __future__ import annotations

import random

from bench.fuzz import fuzz, mutate_kineto, mutate_nsys, report
from bench.seeds import kineto_doc, write_nsys


def test_mutators_are_seeded_and_vary(tmp_path) -> None:
    seed = kineto_doc()
    a = [mutate_kineto(random.Random(i), seed)[0] for i in range(20)]
    assert a == [mutate_kineto(random.Random(i), seed)[0] for i in range(20)]  # reproducible from the seed
    assert len(set(a)) == 20
    base = write_nsys(tmp_path / "seed.sqlite").read_bytes()
    sizes = {mutate_nsys(random.Random(i), base, tmp_path / f"m{i}.sqlite").stat().st_size for i in range(10)}
    assert len(sizes) > 1 or any(tmp_path.glob("*.gz"))


def test_brief_fuzz_run_finds_no_crash_hang_or_blowup(tmp_path) -> None:
    seed = random.Random().randrange(1 << 30)  # a new corner each run; the seed reproduces it
    tally, base = fuzz(40, seed=seed, workers=2, keep=tmp_path / "kept", progress=False)
    lines = report(tally, base, 0.0)
    assert tally.inputs == 40 and tally.runs == 120
    why = f"python -m bench.fuzz --inputs 40 --seed {seed}\n" + "\n".join(lines)
    assert not tally.crashes and not tally.hangs and not tally.blowups, why
    # The mutations reach the loaders' repairs and refusals, not only the happy path.
    kinds = {kind for (_, kind) in tally.outcomes}
    assert "0+warning" in kinds or "2" in kinds, lines
