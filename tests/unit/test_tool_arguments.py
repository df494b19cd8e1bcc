"""The ``python -m load.*`` tools' arguments (load/arguments.py): a bad one is one line on
stderr naming the tool and exit status 2, before any draw runs."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest

from load import blind_waste, bound_misses, dead_letters, fuzz, waste_split
from load.sim.families import MAX_DRAWS

DRAW_TOOLS: dict[str, Callable[[Sequence[str] | None], int]] = {
    "load.blind_waste": blind_waste.main,
    "load.bound_misses": bound_misses.main,
    "load.dead_letters": dead_letters.main,
    "load.waste_split": waste_split.main,
}
BAD_DRAW_ARGUMENTS = [
    (["--draws", "0"], "--draws 0: give 1 to"),
    (["--draws", str(MAX_DRAWS + 1)], f"give 1 to {MAX_DRAWS} draws"),
    (["--family", "nope"], "invalid choice: 'nope'"),
    (["--seed", "x"], "invalid int value: 'x'"),
]


def _one_line_refusal(
    tool: Callable[[Sequence[str] | None], int],
    argv: list[str],
    capsys: pytest.CaptureFixture[str],
) -> str:
    with pytest.raises(SystemExit) as exited:
        tool(argv)
    assert exited.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    (line,) = captured.err.splitlines()
    return line


@pytest.mark.parametrize("module", DRAW_TOOLS)
@pytest.mark.parametrize(("argv", "says"), BAD_DRAW_ARGUMENTS)
def test_a_draw_tool_refuses_a_bad_argument_in_one_line(
    module: str, argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    line = _one_line_refusal(DRAW_TOOLS[module], argv, capsys)
    assert line.startswith(f"python -m {module}: error: ")
    assert says in line
    assert line.endswith(f"(see 'python -m {module} --help')")


def test_dead_letters_names_an_unknown_peer(capsys: pytest.CaptureFixture[str]) -> None:
    line = _one_line_refusal(dead_letters.main, ["--peers", "vegas,nope"], capsys)
    assert "--peers: unknown peer 'nope'" in line


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--realizations", "-1"], "--realizations -1: give 0 to 5 other realizations"),
        (["--realizations", "6"], "--realizations 6: give 0 to 5 other realizations"),
        (["--realizations", "two"], "invalid int value: 'two'"),
    ],
)
def test_bound_misses_refuses_a_bad_realization_count_in_one_line(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    line = _one_line_refusal(bound_misses.main, argv, capsys)
    assert says in line


@pytest.mark.parametrize("argv", [["--inputs", "0"], ["--inputs", "many"]])
def test_fuzz_refuses_a_bad_input_count_in_one_line(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    line = _one_line_refusal(fuzz.main, argv, capsys)
    assert line.startswith("python -m load.fuzz: error: ")
