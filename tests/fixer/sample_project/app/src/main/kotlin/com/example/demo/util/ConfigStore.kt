package com.example.demo.util

import android.content.Context
import java.io.File as JFile

object ConfigStore {
    fun read(context: Context): String {
        return JFile(context.filesDir, "config.txt").readText()
    }

    @JvmStatic
    fun write(context: Context, text: String) {
        JFile(context.filesDir, "config.txt").writeText(text)
    }
}

enum class Mode {
    FAST,
    SLOW;

    fun label(): String = name.lowercase()
}
