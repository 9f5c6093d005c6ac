"""The run directory: ``<base_output_directory>/<run_name>``, where MaxText writes everything of one run.

MaxText joins the two flags into the run's directory (``maxtext/configs/pyconfig.py``: ``checkpoint_dir``,
``metrics_dir`` and ``tensorboard_dir`` all sit under ``base_output_directory/run_name``); the spec, the pipeline's
form, the evaluation results and the plugin name that directory through this one function. Pure.
"""

from __future__ import annotations


def run_directory(base_output_directory: str, run_name: str) -> str:
    """``<base_output_directory>/<run_name>``, whatever trailing slashes the base carries."""
    return f"{base_output_directory.rstrip('/')}/{run_name}"
