"""What the fleet should do now: pure scaling and isolation policies (no I/O, no clock)."""
