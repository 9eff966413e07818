@file:JvmName("TestBuildersKt")

package kotlinx.coroutines.test

import kotlinx.coroutines.CoroutineDispatcher
import kotlinx.coroutines.CoroutineScope
import kotlinx.coroutines.ExperimentalCoroutinesApi
import kotlin.coroutines.CoroutineContext
import kotlin.coroutines.EmptyCoroutineContext
import kotlin.time.Duration

typealias TestResult = Unit

fun runTest(
    context: CoroutineContext = EmptyCoroutineContext,
    timeout: Duration = Duration.INFINITE,
    testBody: suspend TestScope.() -> Unit,
): TestResult = throw UnsupportedOperationException("Stub!")

fun TestScope.runTest(
    timeout: Duration = Duration.INFINITE,
    testBody: suspend TestScope.() -> Unit,
): TestResult = throw UnsupportedOperationException("Stub!")

interface TestScope : CoroutineScope {
    val testScheduler: TestCoroutineScheduler
    val backgroundScope: CoroutineScope
}

fun TestScope(context: CoroutineContext = EmptyCoroutineContext): TestScope =
    throw UnsupportedOperationException("Stub!")

@ExperimentalCoroutinesApi
fun TestScope.advanceUntilIdle(): Unit = throw UnsupportedOperationException("Stub!")

@ExperimentalCoroutinesApi
fun TestScope.runCurrent(): Unit = throw UnsupportedOperationException("Stub!")

@ExperimentalCoroutinesApi
fun TestScope.advanceTimeBy(delayTimeMillis: Long): Unit = throw UnsupportedOperationException("Stub!")

@ExperimentalCoroutinesApi
val TestScope.currentTime: Long
    get() = throw UnsupportedOperationException("Stub!")

class TestCoroutineScheduler {
    val currentTime: Long get() = throw UnsupportedOperationException("Stub!")
    fun advanceUntilIdle(): Unit = throw UnsupportedOperationException("Stub!")
    fun advanceTimeBy(delayTimeMillis: Long): Unit = throw UnsupportedOperationException("Stub!")
    fun runCurrent(): Unit = throw UnsupportedOperationException("Stub!")
}

abstract class TestDispatcher : CoroutineDispatcher() {
    abstract val scheduler: TestCoroutineScheduler
}

fun StandardTestDispatcher(
    scheduler: TestCoroutineScheduler? = null,
    name: String? = null,
): TestDispatcher = throw UnsupportedOperationException("Stub!")

@ExperimentalCoroutinesApi
fun UnconfinedTestDispatcher(
    scheduler: TestCoroutineScheduler? = null,
    name: String? = null,
): TestDispatcher = throw UnsupportedOperationException("Stub!")

@ExperimentalCoroutinesApi
fun kotlinx.coroutines.Dispatchers.setMain(dispatcher: CoroutineDispatcher): Unit =
    throw UnsupportedOperationException("Stub!")

@ExperimentalCoroutinesApi
fun kotlinx.coroutines.Dispatchers.resetMain(): Unit = throw UnsupportedOperationException("Stub!")
