"""`rafka ...`: subcommands mirroring Kafka's tools (see DESIGN.md section 6)."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rafka", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("demo", help="the embedded end-to-end scenario")
    args = parser.parse_args(argv)
    if args.command == "demo":
        from rafka.demo import main as demo_main
        return demo_main()
    return 2


if __name__ == "__main__":
    sys.exit(main())
