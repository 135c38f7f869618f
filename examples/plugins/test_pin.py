import asyncio

from pin import PinToFirstCpus

from nri_api.testing import FakeRuntime, make_container, make_pod


def test_pins() -> None:
    asyncio.run(pins())


async def pins() -> None:
    async with FakeRuntime(nri_version="v0.12.2", config="") as rt:
        sock = await rt.socketpair()  # or: await rt.listen(path)
        plugin = PinToFirstCpus(name="pin", idx="50", connection=sock)
        task = asyncio.create_task(plugin.serve())
        await rt.wait_ready()  # registered, configured, synchronized
        reply = await rt.create_container(make_pod(), make_container())
        assert reply.adjust.linux.resources.cpu.cpus == "0-1"
        await plugin.stop()
        await task
