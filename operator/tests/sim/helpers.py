"""Shared checks of the simulator's command-line tools."""

from __future__ import annotations

from collections.abc import Callable

import pytest


def exits_with_one_line(
    main: Callable[[list[str]], int], argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``main(argv)`` ends in argparse's exit 2 with ``message`` on stderr, no traceback."""
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err
