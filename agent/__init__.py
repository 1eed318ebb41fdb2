"""The agent, UI-free: the loop that drives a model through the five tools (core) and the layer that
keeps the live checkout safe (checkout); evaluation/ runs whole tasks for `ribbit eval`."""
