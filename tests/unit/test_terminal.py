"""Terminal manners: a progress bar only on a terminal (one plain line per step in a log),
colour only on a terminal and never with NO_COLOR or TERM=dumb."""

from __future__ import annotations

import io

from kdsl import term
from kdsl.term import Progress


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_in_a_log_is_one_line_per_step(monkeypatch):
    out = io.StringIO()
    with Progress(3, "tuning", stream=out) as p:
        for cfg in ("a", "b", "c"):
            p.step(cfg)
    text = out.getvalue()
    assert "\r" not in text and "\033" not in text
    assert text.splitlines() == ["tuning: 1/3 a", "tuning: 2/3 b", "tuning: 3/3 c"]


def test_progress_on_a_terminal_redraws_one_line(monkeypatch):
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    out = _Tty()
    with Progress(2, "bench", stream=out) as p:
        p.step("x")
        p.step("y")
    text = out.getvalue()
    assert text.count("\r") == 3 and text.endswith("\n") and text.count("\n") == 1
    assert "\033[32m" in text  # the filled part of the bar is coloured


def test_no_color(monkeypatch):
    monkeypatch.setenv("TERM", "xterm")
    monkeypatch.delenv("NO_COLOR", raising=False)
    assert term.paint("ok", "green", _Tty()) == "\033[32mok\033[0m"
    assert term.paint("ok", "green", io.StringIO()) == "ok"  # not a terminal
    monkeypatch.setenv("NO_COLOR", "1")
    assert term.paint("ok", "green", _Tty()) == "ok"
    out = _Tty()
    with Progress(1, "x", stream=out) as p:
        p.step()
    assert "\033" not in out.getvalue()
    monkeypatch.setenv("NO_COLOR", "")  # empty: colour allowed (no-color.org)
    assert term.color_enabled(_Tty())
    monkeypatch.setenv("TERM", "dumb")
    assert not term.color_enabled(_Tty())


def test_stderr_redirected_to_a_file_gets_plain_lines():
    """`kdsl info 2> file` used to write one 10 kB line of `\\r` frames (the capability
    matrix's progress, on stderr by default)."""
    import contextlib

    err = io.StringIO()
    with contextlib.redirect_stderr(err), Progress(40, "capabilities") as p:
        for i in range(40):
            p.step(f"op{i}")
    assert "\r" not in err.getvalue() and len(err.getvalue().splitlines()) == 40
