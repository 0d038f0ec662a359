from mediaflow.cli.parser import main

raise SystemExit(main())
