"""Modal screens: help and the experiment picker."""
