"""No Python module of the package is over 600 lines: a longer one holds more than one job and
is split, by what it holds, before it lands. The frontend's modules are held to the same limit
by `labextension/src/__tests__/modulesize.spec.ts`. Tests and the built labextension are not
counted (a test module may hold many cases of one behaviour)."""

from __future__ import annotations

from pathlib import Path

MAX_LINES = 600
PACKAGE = Path(__file__).resolve().parents[1] / "jupyter_costguard"


def long_modules(root: Path, limit: int = MAX_LINES) -> list[str]:
    """Each module under `root` over `limit` lines, as 'path (n lines)'."""
    found = []
    for path in sorted(root.rglob("*.py")):
        if "labextension" in path.relative_to(root).parts:
            continue
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > limit:
            found.append(f"{path.relative_to(root)} ({lines} lines)")
    return found


def test_no_module_is_over_the_limit() -> None:
    assert len(list(PACKAGE.rglob("*.py"))) > 50
    assert long_modules(PACKAGE) == []


def test_a_module_over_the_limit_is_named(tmp_path: Path) -> None:
    (tmp_path / "short.py").write_text("x = 1\n" * MAX_LINES)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "long.py").write_text("x = 1\n" * (MAX_LINES + 1))
    assert long_modules(tmp_path) == [f"sub/long.py ({MAX_LINES + 1} lines)"]
