"""The launcher (`kit` with no arguments): a Textual shell over the runner, analysis and results code."""
