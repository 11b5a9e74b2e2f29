"""Tools over converted folders: summary, integrity check, image grids, shuffle quality, throughput."""

from shardfeed.tools.benchmark import bench as bench
from shardfeed.tools.dataset_info import info as info
from shardfeed.tools.preview import show as show
from shardfeed.tools.shuffle_quality import shuffle_report as shuffle_report
from shardfeed.tools.verification import verify as verify

__all__ = ["bench", "info", "show", "shuffle_report", "verify"]
