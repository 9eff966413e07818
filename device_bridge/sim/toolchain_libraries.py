"""What the demo project's androidTest classpath offers, for the simulated compiler.

Two kinds of package:

* **enumerated** (``PACKAGES``): the test libraries the demo project depends on
  (``app/build.gradle.kts``): JUnit 4, Hamcrest, androidx.test (core, ext, runner, rules,
  espresso basics), kotlinx.coroutines. An import from one of them must name a listed symbol,
  otherwise it is an unresolved reference, exactly where kotlinc reports it.
* **open** (``OPEN_ROOTS``): the platform and the standard libraries (``android.*``,
  ``java.*``, ``kotlin.*`` …), too large to list. Any import under them resolves, except the
  few well-known ones that are *not* on this classpath (``kotlin.test``, …).

Everything else (``org.mockito``, ``io.mockk``, ``com.google.common.truth`` …) is not a
dependency of the demo project and does not resolve.

The lists are deliberately about what an LLM-written instrumented test uses; they are not a
model of the whole classpath. Leaning towards "resolves" is the safe side: a false error
sends a valid test into the fixer loop, a missed one only surfaces at run time.
"""

from __future__ import annotations

__all__ = [
    "ACTIVITY_MEMBERS",
    "DEFAULT_NAMES",
    "NOT_ON_CLASSPATH",
    "OPEN_ROOTS",
    "PACKAGES",
    "known_packages",
    "name_index",
]


def _names(text: str) -> frozenset[str]:
    return frozenset(text.split())


# package (or class, for static members / nested classes) → names it exports
PACKAGES: dict[str, frozenset[str]] = {
    "org.junit": _names(
        "Test Before After BeforeClass AfterClass Rule ClassRule Ignore Assert Assume "
        "FixMethodOrder ComparisonFailure AssumptionViolatedException"
    ),
    "org.junit.Assert": _names(
        "assertTrue assertFalse assertEquals assertNotEquals assertNotNull assertNull assertSame "
        "assertNotSame assertArrayEquals assertThat assertThrows fail"
    ),
    "org.junit.Assume": _names("assumeTrue assumeFalse assumeNotNull assumeThat assumeNoException"),
    "org.junit.rules": _names(
        "TestRule TestWatcher Timeout RuleChain ExpectedException TemporaryFolder TestName "
        "ExternalResource ErrorCollector Stopwatch Verifier MethodRule"
    ),
    "org.junit.runner": _names("RunWith Description Result JUnitCore Runner Request"),
    "org.junit.runners": _names(
        "JUnit4 Parameterized MethodSorters BlockJUnit4ClassRunner Suite ParentRunner"
    ),
    "org.junit.runners.model": _names("Statement FrameworkMethod InitializationError"),
    "org.junit.runners.Parameterized": _names("Parameters Parameter"),
    "org.hamcrest": _names("Matchers CoreMatchers MatcherAssert Matcher BaseMatcher Description"),
    "org.hamcrest.Matchers": _names(
        "lessThan greaterThan lessThanOrEqualTo greaterThanOrEqualTo equalTo not notNullValue "
        "nullValue containsString startsWith endsWith allOf anyOf hasItem hasSize instanceOf "
        "closeTo emptyString isEmptyString `is` is"
    ),
    "org.hamcrest.CoreMatchers": _names(
        "equalTo not notNullValue nullValue containsString startsWith endsWith allOf anyOf "
        "instanceOf hasItem `is` is"
    ),
    "org.hamcrest.MatcherAssert": _names("assertThat"),
    "androidx.test.ext.junit.runners": _names("AndroidJUnit4"),
    "androidx.test.ext.junit.rules": _names("ActivityScenarioRule activityScenarioRule"),
    "androidx.test.core.app": _names(
        "ActivityScenario ApplicationProvider launchActivity DeviceCapture takeScreenshot"
    ),
    "androidx.test.core.app.ActivityScenario": _names("ActivityAction launch launchActivityForResult"),
    "androidx.test.platform.app": _names("InstrumentationRegistry"),
    "androidx.test.platform.app.InstrumentationRegistry": _names("getInstrumentation getArguments"),
    "androidx.test": _names("InstrumentationRegistry"),
    "androidx.test.runner": _names("AndroidJUnitRunner AndroidJUnit4"),
    "androidx.test.runner.lifecycle": _names(
        "ActivityLifecycleMonitorRegistry Stage ActivityLifecycleMonitor"
    ),
    "androidx.test.rule": _names(
        "ActivityTestRule UiThreadTestRule GrantPermissionRule ServiceTestRule"
    ),
    "androidx.test.annotation": _names("UiThreadTest Beta"),
    "androidx.test.filters": _names(
        "SmallTest MediumTest LargeTest FlakyTest SdkSuppress RequiresDevice Suppress"
    ),
    "androidx.test.espresso": _names(
        "Espresso ViewInteraction DataInteraction ViewAssertion ViewAction "
        "IdlingRegistry IdlingResource NoMatchingViewException PerformException UiController "
        "Root"
    ),
    "androidx.test.espresso.Espresso": _names(
        "onView onData pressBack pressBackUnconditionally closeSoftKeyboard "
        "openActionBarOverflowOrOptionsMenu onIdle"
    ),
    "androidx.test.espresso.action": _names("ViewActions GeneralClickAction Tap Press"),
    "androidx.test.espresso.action.ViewActions": _names(
        "click typeText replaceText closeSoftKeyboard scrollTo swipeLeft swipeRight swipeUp "
        "swipeDown pressBack clearText longClick doubleClick pressImeActionButton pressKey"
    ),
    "androidx.test.espresso.assertion": _names("ViewAssertions"),
    "androidx.test.espresso.assertion.ViewAssertions": _names("matches doesNotExist selectedDescendantsMatch"),
    "androidx.test.espresso.matcher": _names("ViewMatchers RootMatchers"),
    "androidx.test.espresso.matcher.ViewMatchers": _names(
        "withId withText isDisplayed isRoot withContentDescription isEnabled isClickable "
        "hasDescendant withParent isAssignableFrom withClassName isCompletelyDisplayed "
        "withHint isChecked isNotChecked withEffectiveVisibility Visibility"
    ),
    "kotlinx.coroutines": _names(
        "runBlocking launch async withContext Dispatchers delay Job CoroutineScope GlobalScope "
        "coroutineScope supervisorScope Deferred awaitAll joinAll yield withTimeout "
        "withTimeoutOrNull MainScope ExperimentalCoroutinesApi DelicateCoroutinesApi "
        "CompletableDeferred cancelAndJoin isActive ensureActive SupervisorJob "
        "CoroutineDispatcher asCoroutineDispatcher CoroutineStart cancel"
    ),
    "kotlinx.coroutines.test": _names(
        "runTest StandardTestDispatcher UnconfinedTestDispatcher TestScope setMain resetMain "
        "advanceUntilIdle TestDispatcher TestCoroutineScheduler"
    ),
    "kotlinx.coroutines.android": _names("HandlerDispatcher asCoroutineDispatcher"),
    "kotlinx.coroutines.flow": _names(
        "Flow flow flowOf collect first toList map filter onEach launchIn StateFlow "
        "MutableStateFlow SharedFlow MutableSharedFlow"
    ),
}

# Imports under these roots resolve without a list (the platform and the standard libraries).
OPEN_ROOTS: tuple[str, ...] = (
    "android.",
    "java.",
    "javax.",
    "kotlin.",
    "dalvik.",
    "org.json.",
    "org.xmlpull.",
    "org.w3c.",
    "org.xml.",
    "androidx.annotation.",
    "androidx.lifecycle.",
    "androidx.tracing.",
    "androidx.concurrent.",
)

# ... except these, which are well known and not dependencies of the demo project.
NOT_ON_CLASSPATH: tuple[str, ...] = (
    "kotlin.test",
    "kotlinx.coroutines.debug",
    "android.support",
    "androidx.test.uiautomator",
    "androidx.test.espresso.contrib",
    "androidx.test.espresso.intent",
    "androidx.test.ext.truth",
)

# Names visible without an import: Kotlin's default imports (kotlin.*, kotlin.collections.*,
# kotlin.ranges.*, kotlin.sequences.*, kotlin.text.*, kotlin.io.*, kotlin.comparisons.*,
# kotlin.annotation.*, kotlin.jvm.*) and java.lang.* on the JVM. Lists what tests use.
DEFAULT_NAMES: frozenset[str] = _names(
    # kotlin types and functions
    "Any Unit Nothing String Int Long Short Byte Double Float Boolean Char Number Array "
    "IntArray LongArray ByteArray DoubleArray FloatArray BooleanArray CharArray ShortArray "
    "List MutableList Map MutableMap Set MutableSet Collection MutableCollection Iterable "
    "Sequence Pair Triple Result Lazy Comparable Comparator CharSequence Function Enum "
    "Throwable Exception Error RuntimeException IllegalStateException IllegalArgumentException "
    "NullPointerException UnsupportedOperationException IndexOutOfBoundsException "
    "ArithmeticException ClassCastException NumberFormatException AssertionError "
    "NoSuchElementException ConcurrentModificationException NotImplementedError "
    "KotlinNullPointerException UninitializedPropertyAccessException "
    "println print readLine require requireNotNull check checkNotNull error TODO repeat run "
    "let apply also with takeIf takeUnless lazy lazyOf listOf listOfNotNull mutableListOf "
    "arrayListOf arrayOf arrayOfNulls intArrayOf longArrayOf byteArrayOf doubleArrayOf "
    "emptyArray emptyList emptyMap emptySet mapOf mutableMapOf hashMapOf linkedMapOf setOf "
    "mutableSetOf hashSetOf sequenceOf emptySequence generateSequence sequence buildList "
    "buildMap buildSet buildString maxOf minOf compareBy compareValues runCatching "
    "synchronized assert to until downTo step and or xor inv shl shr ushr in is as "
    "Deprecated Suppress OptIn RequiresOptIn Volatile Synchronized Transient Strictfp Throws "
    "JvmStatic JvmField JvmName JvmOverloads JvmSuppressWildcards JvmWildcard PublishedApi "
    "Target Retention MustBeDocumented Repeatable DslMarker UnsafeVariance ExperimentalStdlibApi "
    "Regex StringBuilder Appendable Charsets "
    # java.lang
    "System Thread Runnable Math StrictMath Object Integer Character Runtime Process "
    "ProcessBuilder InterruptedException Class ClassLoader ThreadLocal InheritableThreadLocal "
    "StackTraceElement SecurityException Void Iterable Cloneable AutoCloseable Override "
    "FunctionalInterface SafeVarargs ReflectiveOperationException ClassNotFoundException "
    "IllegalMonitorStateException OutOfMemoryError StackOverflowError ThreadGroup "
    # always-there identifiers
    "it field value"
)

# Members of android.app.Activity / Context / Any that tests call on an activity instance.
ACTIVITY_MEMBERS: frozenset[str] = _names(
    "runOnUiThread findViewById getSharedPreferences filesDir getFilesDir cacheDir getCacheDir "
    "applicationContext getApplicationContext application getApplication resources "
    "getResources getString getText window getWindow title setTitle finish isFinishing "
    "isDestroyed intent getIntent setIntent setContentView packageName getPackageName "
    "mainLooper getMainLooper startActivity startService stopService sendBroadcast "
    "contentResolver getContentResolver assets getAssets getSystemService openFileInput "
    "openFileOutput deleteFile fileList getDir getDatabasePath databaseList recreate "
    "onBackPressed actionBar getActionBar fragmentManager layoutInflater getLayoutInflater "
    "currentFocus getCurrentFocus hasWindowFocus componentName getComponentName theme getTheme "
    "baseContext getBaseContext registerReceiver unregisterReceiver checkSelfPermission "
    "requestPermissions isChangingConfigurations isTaskRoot moveTaskToBack taskId getTaskId "
    "dataDir getDataDir noBackupFilesDir externalCacheDir getExternalFilesDir mainExecutor "
    "getMainExecutor packageManager getPackageManager callingActivity callingPackage "
    "onCreate onStart onResume onPause onStop onDestroy onRestart onSaveInstanceState "
    "onWindowFocusChanged onTrimMemory onLowMemory toString hashCode equals javaClass let also "
    "apply run takeIf takeUnless to"
)


def known_packages() -> frozenset[str]:
    """Every enumerated package and each of its prefixes (``org``, ``org.junit`` …)."""
    out: set[str] = set()
    for pkg in PACKAGES:
        parts = pkg.split(".")
        for i in range(1, len(parts) + 1):
            out.add(".".join(parts[:i]))
    return frozenset(out)


def name_index() -> dict[str, frozenset[str]]:
    """Simple name → the enumerated packages/classes that export it (for hints and checks)."""
    index: dict[str, set[str]] = {}
    for pkg, names in PACKAGES.items():
        for name in names:
            index.setdefault(name, set()).add(pkg)
    return {k: frozenset(v) for k, v in index.items()}
