"""`reconciler chaos`: kill agent workers at every durable step and check that resuming them
neither repeats nor loses an effect."""
