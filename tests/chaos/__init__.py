"""Randomized fault schedules against the whole stack (issue #14); see __main__."""
