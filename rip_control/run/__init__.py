"""Running it: the runner, the launch plan, the parameter table, evaluation, supervisor."""
