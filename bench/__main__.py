"""``python -m bench``: run the benchmark harness."""

from bench.harness import main

raise SystemExit(main())
