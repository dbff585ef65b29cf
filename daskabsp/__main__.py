"""Command line: ``python -m daskabsp demo`` runs the straggler demo."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help") or argv[0] != "demo":
        print("usage: daskabsp demo [--rows N] [--features D] [--slowdown F] [--workers W] "
              "[--repeats R]\n\n"
              "  demo   start a LocalCluster of worker processes, warm it up with one untimed\n"
              "         fit, then time whole logistic regression fits under BSP, A-BSP and\n"
              "         A-BSP as published (the median of R fits each, in turn), without\n"
              "         and with one worker emulated slower")
        sys.exit(0 if argv and argv[0] in ("-h", "--help") else 2)
    from .lab.demo import main as demo

    demo(argv[1:])


if __name__ == "__main__":
    main()
