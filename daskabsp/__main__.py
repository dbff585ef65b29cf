"""Command line: ``python -m daskabsp demo`` runs the straggler demo."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help") or argv[0] != "demo":
        print("usage: daskabsp demo [--rows N] [--features D] [--slowdown F] [--workers W]\n\n"
              "  demo   fit logistic regression under BSP and A-BSP on an embedded\n"
              "         LocalCluster with one worker emulated slower, and print the speed-up")
        sys.exit(0 if argv and argv[0] in ("-h", "--help") else 2)
    from .lab.demo import main as demo

    demo(argv[1:])


if __name__ == "__main__":
    main()
