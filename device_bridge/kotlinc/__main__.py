from .install import main

raise SystemExit(main())
