"""The GCS client: Application Default Credentials in production, the emulator when configured."""

from __future__ import annotations

import pytest

from elastic_training.operators.checkpoints.storage import GCSStorage, make_gcs_client, storage_for


def test_production_client_uses_application_default_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    import google.auth
    from google.auth.credentials import AnonymousCredentials

    monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)
    monkeypatch.delenv("GOOGLE_CLOUD_PROJECT", raising=False)
    adc = AnonymousCredentials()  # type: ignore[no-untyped-call]
    asked: list[object] = []

    def fake_default(scopes: object = None, **_: object) -> tuple[object, str]:
        asked.append(scopes)
        return adc, "adc-project"

    monkeypatch.setattr(google.auth, "default", fake_default)
    client = make_gcs_client()
    assert asked, "google.auth.default (ADC) was not consulted"
    assert client._credentials is adc
    assert client.project == "adc-project"
    assert client._connection.API_BASE_URL == "https://storage.googleapis.com"


def test_emulator_host_is_honoured_with_anonymous_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    import google.auth
    from google.auth.credentials import AnonymousCredentials

    def no_adc(*_: object, **__: object) -> None:
        raise AssertionError("ADC must not be looked up when an emulator is configured")

    monkeypatch.setattr(google.auth, "default", no_adc)
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", "http://127.0.0.1:9")
    client = make_gcs_client()
    assert isinstance(client._credentials, AnonymousCredentials)
    assert client._connection.API_BASE_URL == "http://127.0.0.1:9"


def test_storage_for_picks_the_backend() -> None:
    assert isinstance(storage_for("gs://bucket/run"), GCSStorage)
    assert not isinstance(storage_for("/data/run"), GCSStorage)
    with pytest.raises(ValueError, match="without a bucket"):
        storage_for("gs:///run")
