"""Harbor's formats, read and written by piexp: task folders (`task.toml`, `instruction.md`,
`environment/`, `solution/solve.sh`, `tests/test.sh`), datasets pinned by content digest
(`dataset.toml`) and ATIF trajectories (`trajectory.json`). The rules follow the `harbor`
package (0.25.0) on PyPI; docs/harbor.md says what is written and how it was validated."""
