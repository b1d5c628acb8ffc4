"""The runner's logger (programs.log's) and its verbosity."""

from programs.log import STDLIB, logger


def configure(verbose: bool) -> None:
    import sys

    if STDLIB:
        import logging

        logging.basicConfig(level=logging.DEBUG if verbose else logging.WARNING, stream=sys.stderr)
    else:
        logger.remove()
        logger.add(sys.stderr, level="DEBUG" if verbose else "WARNING")
