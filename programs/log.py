"""The programs' logger: loguru, as everywhere in the project, or the standard library's where loguru is not installed
(the GPU image has torch, triton, numpy, matplotlib and tqdm, but no loguru), so no GPU run fails on it."""

try:
    from loguru import logger
except ImportError:
    import logging

    logger = logging.getLogger("programs")

STDLIB = not hasattr(logger, "remove")  # the standard library's logger: configured with logging.basicConfig
