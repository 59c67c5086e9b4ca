"""The scheduler without I/O: event handling, the scheduling loop, the
one-pod and PodGroup algorithms, waiting reports. `runtime/` wires it to a
cluster; `simulate/` drives it from a file."""
