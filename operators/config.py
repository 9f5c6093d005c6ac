"""The ``[elastic_training]`` Airflow config section: every option the package reads, with its one default.

The provider metadata (``elastic_training.get_provider_info``) publishes these, so ``airflow config list``
shows them and Airflow's config falls back to their defaults; the code reads them through `get_option`,
which falls back to the same default when the provider metadata is not loaded (a bare ``import``). Set one in
``airflow.cfg`` or as ``AIRFLOW__ELASTIC_TRAINING__<NAME>``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

SECTION = "elastic_training"
SECTION_DESCRIPTION = "Options of the elastic-training operators, trigger and plugin (elastic MaxText JobSets on GKE)."
FIRST_VERSION = "0.1.0"


@dataclass(frozen=True)
class Option:
    """One option of the section, as Airflow's provider config schema describes it (defaults are strings)."""

    name: str
    type: Literal["string", "boolean", "integer", "float"]
    default: str
    description: str
    example: str | None = None
    version_added: str = FIRST_VERSION

    def to_provider_info(self) -> dict[str, Any]:
        """The option's entry in ``get_provider_info()["config"]``."""
        return {
            "description": self.description,
            "version_added": self.version_added,
            "type": self.type,
            "example": self.example,
            "default": self.default,
        }


GKE_PROJECT = Option(
    "gke_project",
    "string",
    "",
    "Google Cloud project of the GKE cluster the JobSets run on, for the Cloud Console links of a ``gke`` run "
    "(neither the JobSet nor its connection names it). Empty: the links go to the Console's workload list.",
    example="my-project",
)
GKE_LOCATION = Option(
    "gke_location",
    "string",
    "",
    "Location (region or zone) of that GKE cluster, for the Cloud Console links.",
    example="us-central2",
)
GKE_CLUSTER = Option(
    "gke_cluster",
    "string",
    "",
    "Name of that GKE cluster, for the Cloud Console links.",
    example="my-cluster",
)
VIEW_KUBERNETES_CONN_ID = Option(
    "view_kubernetes_conn_id",
    "string",
    "kubernetes_default",
    "Kubernetes connection the plugin's live view reads a running task's head-pod log through (it needs only "
    "``list`` pods and ``get`` ``pods/log``).",
    example="kubernetes_tpu",
)
DEFER_SETTLE_SECONDS = Option(
    "defer_settle_seconds",
    "float",
    "20",
    "For this long after a trigger starts (0-300 s), a final decision waits while the watches go on, then is "
    "made again on what is true by then: Airflow 3.3's scheduler fails a task whose trigger fires so fast that "
    "the resumed attempt is already running when it drains the deferring attempt's executor success "
    "(apache/airflow#71580). Set 0 once your Airflow has the fix.",
    example="0",
)

ALERT_NOTIFIER = Option(
    "alert_notifier",
    "string",
    "",
    "Import path of the Airflow notifier class (a ``BaseNotifier``) the shipped nightly DAG sends its alerts and its "
    "missed deadline to, built with ``alert_notifier_kwargs``; it must import in the workers and the triggerer. "
    'Empty: no alerts (docs/operations.md, "Alerts").',
    example="airflow.providers.smtp.notifications.smtp.SmtpNotifier",
)
ALERT_NOTIFIER_KWARGS = Option(
    "alert_notifier_kwargs",
    "string",
    "",
    "The keyword arguments of ``alert_notifier``, as a JSON object (empty: none; its templates may use "
    "``{{ elastic_training_alert.title }}`` and the rest of the alert).",
    example='{"to": "ml-oncall@example.com", "subject": "{{ elastic_training_alert.title }}", '
    '"html_content": "{{ elastic_training_alert.message }}"}',
)
ALERT_QUEUED_AFTER = Option(
    "alert_queued_after",
    "float",
    "1800",
    "Seconds a nightly run may wait for Kueue's admission (queued, or preempted and waiting) before it is alerted; "
    "empty: never.",
    example="600",
)
NIGHTLY_DEADLINE = Option(
    "nightly_deadline",
    "string",
    "",
    "When the shipped nightly DAG's run must be finished: HH:MM (UTC, of the run's logical day: the run of 00:00 done "
    "by 08:00) or a duration from when the run was queued (90m, 6h, 45s). A run past it alerts through "
    "``alert_notifier`` (Airflow's DeadlineAlert). Empty: no deadline.",
    example="08:00",
)
AUTO_REPLAN_FACTOR = Option(
    "auto_replan_factor",
    "float",
    "2",
    '``checkpoint_period="auto"`` restarts a run mid-way with a shorter period when its own slice failures call '
    "for one at least this many times shorter than the one it runs, and the rest of the run repays the restart "
    "(docs/operators.md, 'When the weather changes'). The restart spends no ``max_full_restarts``. 0: never.",
    example="3",
)
AUTO_REPLAN_RESTART_SECONDS = Option(
    "auto_replan_restart_seconds",
    "string",
    "",
    "The downtime of a full restart that the mid-run replan weighs against what a shorter period saves, in "
    "seconds. Empty: what the run's own start took (its JobSet's creation to its first step).",
    example="300",
)

OPTIONS: tuple[Option, ...] = (
    GKE_PROJECT,
    GKE_LOCATION,
    GKE_CLUSTER,
    VIEW_KUBERNETES_CONN_ID,
    DEFER_SETTLE_SECONDS,
    ALERT_NOTIFIER,
    ALERT_NOTIFIER_KWARGS,
    ALERT_QUEUED_AFTER,
    NIGHTLY_DEADLINE,
    AUTO_REPLAN_FACTOR,
    AUTO_REPLAN_RESTART_SECONDS,
)


def get_option(option: Option) -> str:
    """The option's value from Airflow's config, or its default."""
    from airflow.configuration import conf

    return str(conf.get(SECTION, option.name, fallback=option.default) or "")


def provider_config() -> dict[str, Any]:
    """The ``config`` entry of the provider metadata: this section and every option."""
    return {
        SECTION: {
            "description": SECTION_DESCRIPTION,
            "options": {option.name: option.to_provider_info() for option in OPTIONS},
        }
    }
