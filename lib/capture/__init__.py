"""Capture: @rill.capture records eager code into a dataflow graph (see DESIGN.md)."""
