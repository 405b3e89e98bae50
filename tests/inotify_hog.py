"""Use up one user's inotify watches or instances, then wait (test helper, run as that user).

    python inotify_hog.py FOLDER LEAVE_WATCHES LEAVE_INSTANCES

Opens inotify instances and adds watches on the files of FOLDER (one watch per file per
instance) until only LEAVE_WATCHES watches and LEAVE_INSTANCES instances of the per-user limits
are left, prints ``ready <watches> <instances>`` and sleeps until killed. The limits are per
user, so a hog running under a uid of its own affects nobody but the daemon started under the
same uid: the system-wide settings in /proc/sys/fs/inotify are never changed.
"""

from __future__ import annotations

import ctypes
import os
import sys
import time
from pathlib import Path

libc = ctypes.CDLL(None, use_errno=True)
IN_MODIFY = 0x2


def main() -> None:
    folder, leave_watches, leave_instances = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    limits = Path("/proc/sys/fs/inotify")
    max_watches = int((limits / "max_user_watches").read_text())
    max_instances = int((limits / "max_user_instances").read_text())
    names = [os.path.join(folder, n).encode() for n in sorted(os.listdir(folder))]
    fds: list[int] = []
    watches = 0
    want_watches = max_watches - leave_watches
    while len(fds) < max_instances - leave_instances:
        fd = libc.inotify_init()
        if fd < 0:
            break
        fds.append(fd)
        for name in names:
            if watches >= want_watches:
                break
            if libc.inotify_add_watch(fd, name, IN_MODIFY) < 0:
                break
            watches += 1
    print(f"ready {watches} {len(fds)}", flush=True)
    while True:
        time.sleep(60)


if __name__ == "__main__":
    main()
