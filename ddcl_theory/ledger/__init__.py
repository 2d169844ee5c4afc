"""The claims ledger: claims as data, verdicts, tolerances, goldens, the results check and
the nbval plugin. Imports experiments' results, never experiments' code."""
