"""The one member path: check an ensemble's members, resolve precision and layers once, run the members,
decode and combine their readings."""
