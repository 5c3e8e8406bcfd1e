"""How a pass over the data reports: a tqdm bar on a terminal, plain lines in a log file, or nothing.

Under nohup, SLURM or `> log.txt 2>&1` a bar would write one line of carriage returns per epoch, kilobytes
long. `--progress auto` (the default) draws the bar only when stderr is a terminal and otherwise prints a
plain line (step, loss, images per second) every LINE_EVERY_S seconds at most and at the pass's end; `bar`,
`lines` and `none` choose outright. A bar is cleared before anything else is printed (`with Progress(...)`),
so an error never lands on a bar's line.
"""

from __future__ import annotations

import sys
import time

from tqdm import tqdm

MODES = ("auto", "bar", "lines", "none")
LINE_EVERY_S = 30.0  # at most one progress line per half minute in a log file


def resolve(mode: str) -> str:
    """`auto` as this process's stderr calls for: a bar on a terminal, lines elsewhere."""
    if mode != "auto":
        return mode
    return "bar" if sys.stderr.isatty() else "lines"


class Progress:
    """An iterable's progress, shown as `mode` says (auto | bar | lines | none; True/False: auto/none);
    `show(position, **figures)` updates it at the `position`-th item."""

    def __init__(self, iterable, desc: str, mode: str | bool = "none"):
        mode = {True: "auto", False: "none"}.get(mode, mode)  # a str is never equal to a bool
        self.iterable, self.desc, self.mode, self.position, self.total = iterable, desc, resolve(mode), 0, len(iterable)
        self.last_line, self.figures, self.printed = time.monotonic(), {}, None
        self.bar = tqdm(iterable, desc=desc, total=self.total, leave=False) if self.mode == "bar" else None

    def __iter__(self):
        return iter(self.bar if self.bar is not None else self.iterable)

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.close()  # cleared: what is printed next starts on a line of its own
        elif self.mode == "lines" and exc[0] is None and self.figures and self.printed != self.position:
            self._line()  # the pass's last figures, unless the clock just printed them (a slow last step)

    def show(self, position: int, **figures: str) -> None:
        """The figures at the `position`-th item: the bar's postfix, or a line when LINE_EVERY_S has passed."""
        self.position, self.figures = position, figures
        if self.bar is not None:
            self.bar.set_postfix(figures)
        elif self.mode == "lines" and time.monotonic() - self.last_line >= LINE_EVERY_S:
            self._line()

    def _line(self) -> None:
        self.last_line, self.printed = time.monotonic(), self.position
        figures = "  ".join(f"{key} {value}" for key, value in self.figures.items())
        print(f"{self.desc}: {self.position}/{self.total}  {figures}", file=sys.stderr, flush=True)
