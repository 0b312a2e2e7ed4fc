"""The one compiled module: Kafka's record walk in C (protocol/kafka/_recordwalk.c).

Everything else is in pyproject.toml; setuptools reads both when `pip install`
builds the project (an editable install builds the module in place). Plain C
against Python's own headers: no dependency, nothing downloaded.
"""

from setuptools import Distribution, Extension, setup

EXTENSIONS = [
    Extension(
        "protocol.kafka._recordwalk",
        sources=["protocol/kafka/_recordwalk.c"],
        extra_compile_args=["-O2", "-std=c99", "-Wall", "-Wextra", "-Werror=implicit"],
    )
]


def build_in_place() -> None:
    """Compile the extensions beside their sources (`make ext`): for a checkout whose
    environment was installed from another one. Reads no pyproject.toml, so it works
    with an older setuptools than the one `pip install` builds with."""
    dist = Distribution({"ext_modules": EXTENSIONS})
    command = dist.get_command_obj("build_ext")
    command.inplace = True
    dist.run_command("build_ext")


if __name__ == "__main__":
    setup(ext_modules=EXTENSIONS)
