"""The tools: checking, timing and inspecting kernels, and the `kdsl` command line.

One layer above the runtime, the backends and the library, with no import cycle inside it;
each module imports only those listed before it:

    tolerance      the tolerance rule and float64 comparisons (`kd.testing.assert_close`)
    arrays         copies and host views of arrays of any kind, outputs by name
    report         one comparison's numbers: errors, ULPs, the printed table
    bench          `kd.testing.do_bench`: the backend's clock, launch overhead
    loader         importing a kernel from FILE.py:KERNEL
    program_map    which program wrote each element (the reference interpreter, observed)
    bundle         repro bundles of a failed comparison
    compare        `kd.testing.compare`: every backend against a float64 reference
    repro          re-running a bundle
    roofline       the machine's bandwidth and peak per backend
    sweep          `kdsl bench`: size sweeps, GB/s, GFLOP/s, roofline fractions, plots
    capabilities   the capability matrix of `kdsl info`
    fuzz/          the differential fuzzer (`python -m kdsl.fuzz`)
    cli            the `kdsl` command line (`kdsl.cli:main`)

The library's catalogue of default inputs (`kdsl.kernels.cases`) sits beside the library.
Public spellings: `kd.testing` (kdsl/testing.py), `kdsl.cli`, `kdsl.fuzz`.
"""
