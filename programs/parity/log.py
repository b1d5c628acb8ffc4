"""The runner's logger: loguru, as everywhere in the project, or the standard library's where loguru is not installed
(the GPU image has torch, triton, numpy, matplotlib and tqdm, but no loguru), so a parity run never fails on it."""

try:
    from loguru import logger
except ImportError:
    import logging

    logger = logging.getLogger("programs.parity")


def configure(verbose: bool) -> None:
    import sys

    if hasattr(logger, "remove"):
        logger.remove()
        logger.add(sys.stderr, level="DEBUG" if verbose else "WARNING")
    else:
        import logging

        logging.basicConfig(level=logging.DEBUG if verbose else logging.WARNING, stream=sys.stderr)
