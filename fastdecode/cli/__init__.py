"""The ``fastdecode`` command line: one module per subcommand, each imported
only when it runs (see ``fastdecode.cli.__main__``)."""
