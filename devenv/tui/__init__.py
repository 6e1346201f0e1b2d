"""L3: the Textual front end. Talks to the services layer through workers, never to adapters directly."""
