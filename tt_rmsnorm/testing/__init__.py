"""What tests, the demo and the parity runner need to run real ttnn without Tenstorrent hardware; nothing on the
call path imports it.

- `mock_cluster`: configure a process for a mock Wormhole (N150, N300, T3000, Galaxy) or Blackhole (P150, P300,
  Blackhole Galaxy) system and open its meshes;
- `blackhole_boards`: the Blackhole systems' cluster descriptors, written from each board's public facts;
- `sfpi_stand_in`: the stand-in for the SFPI compiler that opening a mock device needs;
- `workers`: run ttnn calls in isolated worker processes, one per mock system;
- `recorder`: record the ttnn calls a block of code makes (ops, semaphore handles, persistent buffers, allocations);
- `dry_run`: every path of `distributed_rms_norm` through real ttnn on a mock mesh;
- `cluster_descriptors/`: the mock systems' UMD cluster descriptors.
"""
