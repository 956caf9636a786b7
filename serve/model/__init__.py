"""A loaded model version: its instances, scheduler, statistics and request checks."""
