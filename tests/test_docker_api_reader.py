"""The HTTP response file devenv gives docker-py over an SSH channel (runtimes/docker_api.ChannelReader) reads
nothing past what http.client asks for: docker-py reads a hijacked exec stream from the file's `.channel`, so
whatever a file read ahead behind the headers was lost. With paramiko's own file (what the channel's makefile()
gave before), an exec whose output came in the same packet as the response's headers lost it: the behaviour
suite's docker runs cases failed so (the log's head line missing, a run's id never printed)."""

from __future__ import annotations

import http.client
import socket

import pytest

from devenv.remote.sshlib import paramiko
from devenv.runtimes.docker_api import ChannelSocket, _ChannelConnection, _Dialer

HEADERS = b"HTTP/1.1 101 UPGRADED\r\nContent-Type: application/vnd.docker.raw-stream\r\nConnection: Upgrade\r\n\r\n"
STREAM = b"\x01\x00\x00\x00\x00\x00\x00\x0ahead line\n"   # one stdout frame, right behind the headers


class OnePacketChannel:
    """A channel whose first recv gives the headers and the stream's start together, as sshd often does."""

    def __init__(self, data: bytes):
        self.data = data

    def recv(self, n: int) -> bytes:
        out, self.data = self.data[:n], self.data[n:]
        return out

    def settimeout(self, timeout: float | None) -> None:
        pass


def response_over(sock) -> http.client.HTTPResponse:
    response = http.client.HTTPResponse(sock, method="POST")  # type: ignore[arg-type]
    response.begin()
    return response


def test_the_stream_behind_the_headers_is_still_on_the_channel():
    channel = OnePacketChannel(HEADERS + STREAM)
    response = response_over(ChannelSocket(channel))  # type: ignore[arg-type]
    assert response.status == 101
    assert response.fp.channel is channel                 # where docker-py reads the hijacked stream from
    assert channel.recv(1024) == STREAM                   # nothing of it was taken by the headers' reading


def test_paramikos_own_file_takes_it_which_is_why_it_is_not_used():
    channel = OnePacketChannel(HEADERS + STREAM)

    class Plain:   # the channel as http.client's socket, with paramiko's buffered file, as before
        def makefile(self, mode="rb", *args):
            return paramiko.channel.ChannelFile(channel, mode)  # type: ignore[arg-type]

    response_over(Plain())
    assert channel.recv(1024) == b""                      # read ahead into that file's buffer: lost to docker-py


def test_a_body_of_known_length_is_read_whole():
    body = b'{"Id": "abc"}'
    channel = OnePacketChannel(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body + b"NEXT")
    response = response_over(ChannelSocket(channel))  # type: ignore[arg-type]
    assert response.read() == body and channel.recv(10) == b"NEXT"   # the next response's bytes stay


def test_a_channel_that_cannot_be_opened_is_a_connection_failure_not_a_raw_ssh_exception():
    # paramiko's SSHException is no OSError: it passed urllib3, docker-py and the runtime's handlers untouched (a
    # followed log's thread in the monitor died of "Unable to open channel" in a full run, saying nothing)
    ours, theirs = socket.socketpair()
    never_started = paramiko.Transport(ours)   # no session: no channel can open on it

    class Conn:
        transport = never_started

    connection = _ChannelConnection(Conn(), 5, _Dialer("gpu1", "docker system dial-stdio", socket_path=None))
    try:
        with pytest.raises(ConnectionError, match="cannot open a channel to the container engine"):
            connection.connect()
    finally:
        never_started.close()
        theirs.close()
