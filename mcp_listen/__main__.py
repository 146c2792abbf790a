"""`python -m mcp_listen` runs the same CLI as the `mcp-listen` script."""

from mcp_listen.cli.main import main

raise SystemExit(main())
