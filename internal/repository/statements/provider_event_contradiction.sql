-- A provider's event that contradicts the record, kept once
-- (ProviderReports.KeepContradiction).
INSERT INTO provider_event_contradiction (consumer_name, event_id, event_type, provider_key, recorded_status, reason, event)
VALUES (@consumer, @event_id, @event_type, @provider_key, @recorded_status, @reason, CAST(@event AS json))
    ON CONFLICT (consumer_name, event_id) DO NOTHING
