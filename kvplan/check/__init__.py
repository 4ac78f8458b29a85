"""`kvplan check`: read deployment files, size what they run, report what would fail.

inputs (`kubernetes`, `compose`, `planfile`, --cmd) -> `command` (find the engine command) ->
`mapping` (flags as the engine's parser reads them) -> `checks`, `sizing_checks`,
`capacity_checks` -> `report` (human, JSON, GitHub annotations, JUnit). docs/check.md.
"""
