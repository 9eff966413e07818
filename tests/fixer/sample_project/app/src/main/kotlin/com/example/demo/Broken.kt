package com.example.demo

class Broken {
    fun stillIndexed(): Int = 1

    fun halfWritten(x: Int) {
        val y = (x +
    }
}
