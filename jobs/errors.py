"""Turning the user's mistakes (bad config, bad manifest) into one clear line instead of a traceback."""

import sys
from contextlib import contextmanager

from hydra.errors import (
    ConfigCompositionException,
    InstantiationException,
    OverrideParseException,
)

from pipeline.manifest import ManifestError
from stages.base import ConfigError
from store.store import ArtifactMissing

USER_ERRORS = (ConfigError, ManifestError, ArtifactMissing, OverrideParseException, ConfigCompositionException)


@contextmanager
def user_errors():
    try:
        yield
    except USER_ERRORS as error:
        _exit(error)
    except InstantiationException as error:
        # Hydra wraps what a constructor raised; a ConfigError inside is still the user's mistake.
        if isinstance(error.__cause__, USER_ERRORS):
            _exit(error.__cause__)
        raise


def _exit(error: Exception) -> None:
    print(f"error: {error}", file=sys.stderr)
    sys.exit(2)
