"""Mounted filesystems that hold no data files, which a scan must not walk: /proc alone holds a
folder per process, each with links back to / and files that block when read."""

from __future__ import annotations

import os

SPECIAL_FILESYSTEMS = frozenset({
    "proc", "sysfs", "devtmpfs", "devpts", "cgroup", "cgroup2", "debugfs", "tracefs",
    "securityfs", "pstore", "bpf", "configfs", "fusectl", "mqueue", "binfmt_misc", "autofs",
    "efivarfs", "rpc_pipefs", "nsfs", "selinuxfs", "hugetlbfs", "devfs"})
MOUNT_TABLE = "/proc/self/mountinfo"


def special_devices(mount_table: str = MOUNT_TABLE) -> dict[int, str]:
    """st_dev -> filesystem type of every special filesystem mounted here, read once from the
    mount table, so that telling one costs a dict lookup on a stat already made. Empty where
    there is no such table (not Linux): there, devices are still refused as non-regular files.
    """
    try:
        with open(mount_table) as table:
            lines = table.read().splitlines()
    except OSError:
        return {}
    devices = {}
    for line in lines:
        # "ID PARENT MAJOR:MINOR ROOT MOUNTPOINT OPTIONS [TAGS...] - TYPE SOURCE OPTIONS"
        fields, _, rest = line.partition(" - ")
        kind = rest.split(" ", 1)[0]
        major, _, minor = (fields.split(" ")[2:3] or [""])[0].partition(":")
        if kind in SPECIAL_FILESYSTEMS and major.isdigit() and minor.isdigit():
            devices[os.makedev(int(major), int(minor))] = kind
    return devices
