"""Process-level settings: environment variables, failure points, paths, preloading, lazy surfaces."""

from include.process.surface import lazy_surface

__all__, __getattr__, __dir__ = lazy_surface(__name__, {
    "failpoints": ["DRIVER_PID_ENV", "failpoint"],
    "interpreter_exit": ["skip_exit_collection"],
    "paths": ["LOCAL_DIR", "PROJECT_ROOT"],
    "preloading": ["parse_modules", "preload"],
    "surface": ["lazy_surface"],
})
