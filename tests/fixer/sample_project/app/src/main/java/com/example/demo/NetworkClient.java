package com.example.demo;

import java.io.IOException;
import java.net.URL;
import static java.util.Objects.requireNonNull;

public class NetworkClient {
    private final String host;

    public NetworkClient(String host) {
        this.host = requireNonNull(host);
    }

    public static String fetchBlocking(String path) throws IOException {
        URL url = new URL("https://example.com" + path);
        return url.toString();
    }

    public int port() {
        return 443;
    }

    interface Listener {
        void onDone(String body);
    }
}
