"""The `snapcache` command, as the wheel ships it (snapcache/bin/snapcache, on the same library)."""

import os
import sys


def executable():
    """The path of the `snapcache` command in this package."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "snapcache")


def main():
    path = executable()
    if not os.path.exists(path):
        sys.stderr.write(f"snapcache: the command is not in this installation ({path})\n")
        return 127
    os.execv(path, [path] + sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
