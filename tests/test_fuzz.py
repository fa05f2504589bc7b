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


def test_hostile_shapes_end_within_the_contract(tmp_path, monkeypatch) -> None:
    """One input of each hostile shape (small sizes) and an nsys table replaced by a recursive view,
    through the real command line: exit 0 or 2, one line, well inside the hang limit."""
    import sqlite3

    from bench import fuzz as fz
    from bench.clirun import CliServer

    monkeypatch.setattr(fz, "DEPTHS", (1_100,))
    monkeypatch.setattr(fz, "DIGITS", (401,))
    monkeypatch.setattr(fz, "BOMB_MB", (2,))
    seed = kineto_doc()
    kinds: dict[str, tuple[bytes, str]] = {}
    for i in range(200):
        rng = random.Random(i)
        op = rng.random()
        kind = "deep" if op < 0.3 else "digits" if op < 0.5 else "bomb" if op < 0.75 else "ranges"
        if kind not in kinds:
            kinds[kind] = fz._shape(random.Random(i), seed)
    assert set(kinds) == {"deep", "digits", "bomb", "ranges"}
    paths = []
    for kind, (data, suffix) in kinds.items():
        path = tmp_path / f"{kind}{suffix}"
        path.write_bytes(data)
        paths.append(path)
    view = write_nsys(tmp_path / "view.sqlite")
    con = sqlite3.connect(view)
    fz._view_for(con, "CUPTI_ACTIVITY_KIND_RUNTIME", fz._tables(con)["CUPTI_ACTIVITY_KIND_RUNTIME"], True)
    con.commit()
    con.close()
    paths.append(view)
    env = {"GAPLENS_CACHE_DIR": str(tmp_path / "cache"), "GAPLENS_STATE_DIR": str(tmp_path / "state")}
    with CliServer(env) as server:
        for path in paths:
            result = server.run(["summary", str(path)], timeout_s=60, rss_limit_mb=1024)
            assert not result.timed_out and not result.over_memory, path.name
            assert fz.contract_problems(result) == [], (path.name, result.err[-300:])
    assert result.rc == 2 and b"is a view, not a table" in result.err
