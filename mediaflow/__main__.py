from mediaflow.cli import main

raise SystemExit(main())
