"""Test infrastructure shipped with the package (pytest plugins used by ``make test``)."""
